// The Trainer's part of the model: the plan's cut of it (runtime/planner/rank_cut.h) and its
// initial slices, its recompute segments (partition_activations' slices among them), and the
// plan's process groups it joins.
#include <algorithm>

#include "parallel/comm/communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/recompute.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

Status Trainer::CutGraph(const plan::PlanConfig& config) {
  DS_ASSIGN_OR_RETURN(
      planner::RankGraph part,
      planner::CutRankGraph(std::move(graph_), plan_->ranks(world_rank_).cut(), config));
  *part_ = std::move(part);
  graph_ = part_->graph;
  if (part_->sliced) SliceParameters(part_->sliced);
  for (const std::string& line : planner::DescribeRankCut(*part_, config))
    DS_LOG_INFO("worker", "{}", line);
  return OkStatus();
}

// This rank's parameters are `local`'s boxes of the whole ones: initialization draws each whole
// tensor and keeps the rank's part, so every layout starts from the same weights.
void Trainer::SliceParameters(const parallel::TpLocalGraph* local) {
  init_slicer_ = std::make_unique<zero::InitSlicer>();
  init_slicer_->full_numel = [local](int slot) {
    int64_t n = 1;
    for (int64_t d : local->shards[slot].full_shape) n *= d;
    return n;
  };
  init_slicer_->take = [local](int slot, const float* full, float* part) {
    parallel::TakeShard(local->shards[slot], full, part);
  };
  init_slicer_->needed = [local](int slot) { return parallel::ShardRanges(local->shards[slot]); };
}

StatusOr<int> Trainer::SetRecompute(int chunk, exec::ExecutorOptions* eo) {
  DS_ASSIGN_OR_RETURN(plan::PlanConfig pc, plan::PlanConfigFromJob(config_));
  const bool pipe = !part_->chunks.empty();
  const Graph& g = pipe ? part_->chunks.at(chunk) : graph_;
  DS_ASSIGN_OR_RETURN(eo->recompute, RecomputeSegments(g, pc.recompute));
  eo->checkpoint_rank = part_->cut.tp_rank();
  int split = 0;
  if (pc.partition_activations && part_->tp) {
    const std::vector<bool>& replicated =
        pipe ? part_->chunk_tp.at(chunk).replicated : part_->tp->replicated;
    split = PartitionCheckpoints(g, replicated, plan_->topology().tp(), &eo->recompute);
  }
  // cpu_checkpointing on a device: the plan's rule, after the partition as the planner does.
  if (pc.cpu_checkpointing) OffloadCheckpoints(g, &eo->recompute);
  return split;
}

void Trainer::ReportPartitionedActivations(const plan::Topology& topology, int split) {
  if (world_rank_ != 0) return;
  if (split > 0) {
    DS_LOG_INFO("worker",
                "partition_activations: {} block input{} kept as 1/{} slices, all-gathered over tp "
                "before each recompute",
                split, split == 1 ? "" : "s", topology.tp);
    return;
  }
  const std::string key = config_.source + ": activation_checkpointing.partition_activations";
  if (config_.recompute.mode != "full")
    DS_LOG_WARN("worker",
                "{} changes nothing with training.recompute {}: it splits the block "
                "inputs full recompute keeps",
                key, config_.recompute.mode);
  else if (topology.tp <= 1)
    DS_LOG_WARN("worker",
                "{} changes nothing without tensor parallelism (tp 1): every rank "
                "keeps its block inputs whole",
                key);
  else
    DS_LOG_WARN("worker", "{} changes nothing here: no block input is the same on every tp rank",
                key);
}

Status Trainer::CreateGroups() {
  const int world = world_comm_->size();
  parallel::Communicator* const world_host = host_comm_;
  for (const proto::ProcessGroup& g : plan_->groups()) {
    parallel::Communicator* comm = nullptr;
    // Every rank: the communicator itself (its host-memory twin); a pipeline link is its own
    // (its two directions and the world's collectives run at the same time).
    if (g.ranks_size() == world && g.kind() != "pipe") {
      comm = world_host;
    } else {
      DS_ASSIGN_OR_RETURN(
          std::unique_ptr<parallel::Communicator> child,
          world_comm_->Split(std::vector<int>(g.ranks().begin(), g.ranks().end()), g.name()));
      if (!child) continue;  // not a member
      comm = child.get();
      groups_.push_back(std::move(child));
    }
    if (std::find(g.ranks().begin(), g.ranks().end(), world_rank_) == g.ranks().end()) continue;
    group_by_name_[g.name()] = comm;
    if (g.kind() == "tp") tp_comm_ = comm;
    if (g.kind() == "ep") ep_comm_ = comm;
    if (g.kind() == "sp") sp_comm_ = comm;
    if (g.kind() == "dp" && g.ranks_size() != world) comm_ = host_comm_ = comm;
  }
  return OkStatus();
}

}  // namespace ds::worker
