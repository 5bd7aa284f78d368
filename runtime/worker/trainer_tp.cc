// The Trainer's tensor-, expert- and sequence-parallel part: its tp rank's graph and initial
// slices, its ep / sp rank's graph, the plan's process groups, and a whole forward with the tp,
// ep and sp collectives (evaluation).
#include <algorithm>

#include "parallel/comm/communicator.h"
#include "parallel/expert/ep_graph.h"
#include "parallel/sequence/ulysses_graph.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/recompute.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/plan/plan_config.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

Status Trainer::PartitionForTensorParallel(const plan::Topology& topology) {
  DS_ASSIGN_OR_RETURN(plan::ParallelGrid grid,
                      plan::ParallelGrid::Create(topology.world, topology.tp, topology.pp,
                                                 topology.ep, topology.sp));
  const int tp_rank = grid.CoordOf(world_rank_).tp;
  tp_rank_ = tp_rank;
  DS_ASSIGN_OR_RETURN(parallel::TpLocalGraph local,
                      parallel::TensorParallelGraph(graph_, topology.tp, tp_rank,
                                                    config_.parallel.sequence_parallel));
  // Expert parallelism beside it: this ep rank's experts, each tp rank routing its share of the
  // tokens (ep_graph.h).
  DS_RETURN_IF_ERROR(parallel::ApplyExpertParallel(topology.ep, grid.EpRankOf(world_rank_), &local,
                                                   topology.tp, tp_rank));
  tp_ = std::make_unique<parallel::TpLocalGraph>(std::move(local));
  full_graph_ = std::move(graph_);
  graph_ = tp_->graph;
  SliceParameters(tp_.get());
  if (topology.tp > 1)
    DS_LOG_INFO("worker", "tensor parallel: rank {} is tp rank {} of {}, dp rank {} of {}",
                world_rank_, tp_rank, topology.tp, grid.CoordOf(world_rank_).dp, grid.dp());
  if (topology.ep > 1) {
    const int64_t experts = parallel::NumExperts(full_graph_), ep_rank = grid.EpRankOf(world_rank_);
    DS_LOG_INFO("worker",
                "expert parallel: rank {} is ep rank {} of {}: holds experts {}-{} of {} and "
                "routes 1/{} of the tokens",
                world_rank_, ep_rank, topology.ep, ep_rank * experts / topology.ep,
                (ep_rank + 1) * experts / topology.ep - 1, experts, topology.tp);
  }
  return OkStatus();
}

// This rank's parameters are `local`'s boxes of the whole ones: initialization draws each whole
// tensor and keeps the rank's part, so every layout starts from the same weights.
void Trainer::SliceParameters(const parallel::TpLocalGraph* local) {
  sliced_ = local;
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

// Expert parallelism or Ulysses at tp 1: this ep rank's experts, held and computed, or this sp
// rank's chunk of each sequence; the all-to-all nodes in place (ep_graph.h, ulysses_graph.h).
Status Trainer::PartitionForRank(const plan::Topology& topology) {
  DS_ASSIGN_OR_RETURN(plan::ParallelGrid grid,
                      plan::ParallelGrid::Create(topology.world, topology.tp, topology.pp,
                                                 topology.ep, topology.sp));
  const int ep_rank = grid.EpRankOf(world_rank_), sp_rank = grid.SpRankOf(world_rank_);
  DS_ASSIGN_OR_RETURN(parallel::TpLocalGraph local, parallel::TensorParallelGraph(graph_, 1, 0));
  DS_RETURN_IF_ERROR(parallel::ApplyExpertParallel(topology.ep, ep_rank, &local));
  DS_RETURN_IF_ERROR(parallel::ApplyUlysses(topology.sp, sp_rank, &local));
  rank_graph_ = std::make_unique<parallel::TpLocalGraph>(std::move(local));
  full_graph_ = std::move(graph_);
  graph_ = rank_graph_->graph;
  if (topology.ep > 1) SliceParameters(rank_graph_.get());  // its experts only
  const int64_t experts = parallel::NumExperts(full_graph_);
  if (topology.ep > 1)
    DS_LOG_INFO("worker", "expert parallel: rank {} is ep rank {} of {}: holds experts {}-{} of {}",
                world_rank_, ep_rank, topology.ep, ep_rank * experts / topology.ep,
                (ep_rank + 1) * experts / topology.ep - 1, experts);
  if (topology.sp > 1)
    DS_LOG_INFO("worker",
                "ulysses: rank {} is sp rank {} of {}: its chunk of every sequence, data rank {} "
                "of {}",
                world_rank_, sp_rank, topology.sp, grid.DataRankOf(world_rank_),
                grid.dp() / topology.sp);
  return OkStatus();
}

StatusOr<int> Trainer::SetRecompute(int chunk, exec::ExecutorOptions* eo) {
  DS_ASSIGN_OR_RETURN(plan::PlanConfig pc, plan::PlanConfigFromJob(config_));
  const bool pipe = !pipe_chunks_.empty();
  const Graph& g = pipe ? pipe_chunks_.at(chunk) : graph_;
  DS_ASSIGN_OR_RETURN(eo->recompute, RecomputeSegments(g, pc.recompute));
  eo->checkpoint_rank = tp_rank_;
  int split = 0;
  if (pc.partition_activations && tp_) {
    const std::vector<bool>& replicated = pipe ? pipe_tp_.at(chunk).replicated : tp_->replicated;
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

Status Trainer::ForwardWhole(exec::Executor* ex, const parallel::TpLocalGraph* local) {
  if (!local) return ex->Forward(0);
  int at = 0;
  for (const parallel::TpCollective& c : local->collectives) {
    if (c.backward) continue;
    DS_RETURN_IF_ERROR(ex->ForwardNodes(0, at, c.boundary));
    at = c.boundary;
    parallel::Communicator* comm = c.group == "ep"   ? ep_comm_
                                   : c.group == "sp" ? sp_comm_
                                                     : tp_comm_;
    const Tensor t = ex->TensorData(c.tensor, false);
    const parallel::BufferView in(t.f32(), t.numel());
    if (c.kind == parallel::TpCollective::kAllReduce) {
      DS_RETURN_IF_ERROR(
          comm->AllReduce(in, c.max ? parallel::ReduceOp::kMax : parallel::ReduceOp::kSum));
      continue;
    }
    const Tensor o = ex->TensorData(c.out, false);
    const parallel::BufferView out(o.f32(), o.numel());
    if (c.kind ==
        parallel::TpCollective::kAllToAll) {  // MoE: the step's capacity rows of each block
      const int64_t used =
          c.capacity < 0
              ? t.numel()
              : t.dim(0) * static_cast<int64_t>(ex->TensorData(c.capacity, false).f32()[0]) *
                    t.dim(2);
      DS_RETURN_IF_ERROR(
          comm->AllToAll(parallel::BufferView(t.f32(), used), parallel::BufferView(o.f32(), used)));
      continue;
    }
    DS_RETURN_IF_ERROR(c.kind == parallel::TpCollective::kAllGather
                           ? comm->AllGather(in, out)
                           : comm->ReduceScatter(in, out, parallel::ReduceOp::kSum));
  }
  return ex->ForwardNodes(0, at, static_cast<int>(local->graph.nodes.size()));
}

}  // namespace ds::worker
