// The Trainer's pipeline-parallel part: this rank's stage graph (the planner's cut,
// runtime/planner/pipe_plan.h) and the executors of its activation slots under one PipelineCompute.
#include <algorithm>
#include <map>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipe_streams.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/pipe_plan.h"
#include "runtime/worker/pipe_compute.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// With tensor parallelism (PartitionForTensorParallel ran first) the stages are cut out of this
// tp rank's graph, and tp_->shards are put in the stage's parameter order (tp_->graph stays the
// rank's whole part: the checkpoint's shapes).
Status Trainer::PartitionForPipeline(const plan::Topology& topology) {
  if (device_memory_)
    return UnimplementedError("parallel.pipeline " + std::to_string(topology.pp) +
                              " with device.type cuda is not run yet: its sends and receives "
                              "move host activations (Gloo); train on the CPU");
  DS_ASSIGN_OR_RETURN(plan::PlanConfig pc, plan::PlanConfigFromJob(config_));
  DS_ASSIGN_OR_RETURN(plan::ParallelGrid grid,
                      plan::ParallelGrid::Create(topology.world, topology.tp, topology.pp));
  DS_ASSIGN_OR_RETURN(std::vector<parallel::PipeStageGraph> stages,
                      parallel::PipelineStageGraphs(graph_, topology.pp, pc));
  pipe_stage_ = grid.CoordOf(world_rank_).pp;
  for (size_t s = pipe_stage_; tp_ && s < stages.size(); s += topology.pp) {
    DS_ASSIGN_OR_RETURN(pipe_tp_.emplace_back(), parallel::StageTpLocal(*tp_, stages[s]));
  }
  if (!tp_) full_graph_ = std::move(graph_);
  graph_ = parallel::PipelineRankGraph(stages, topology.pp, pipe_stage_);  // all its chunks
  if (tp_) {
    std::map<std::string, size_t> index;
    const std::vector<int> local = tp_->graph.Params();
    for (size_t i = 0; i < local.size(); ++i) index[tp_->graph.tensors[local[i]].name] = i;
    std::vector<parallel::TpParamShard> shards;
    for (int t : graph_.Params())
      shards.push_back(tp_->shards.at(index.at(graph_.tensors[t].name)));
    tp_->shards = std::move(shards);  // the initializer's slicer and the loader read them
  }
  for (size_t s = pipe_stage_; s < stages.size(); s += topology.pp) {
    pipe_io_.push_back({stages[s].recv, stages[s].send});
    pipe_chunks_.push_back(std::move(stages[s].graph));
  }
  int params = 0;
  for (const TensorInfo& t : graph_.tensors) params += t.role == TensorRole::kParam;
  DS_LOG_INFO("worker",
              "pipeline: rank {} runs stage {} of {} ({} chunk{}, {} nodes, {} parameter "
              "tensors), dp rank {} of {}, schedule {}",
              world_rank_, pipe_stage_, topology.pp, pipe_chunks_.size(),
              pipe_chunks_.size() == 1 ? "" : "s", graph_.nodes.size(), params,
              grid.CoordOf(world_rank_).dp, grid.dp(), plan::PipeScheduleName(pc.pipe_schedule));
  return OkStatus();
}

Status Trainer::BuildPipelineCompute(const exec::ExecutorOptions& options) {
  const proto::StageLayout& layout = plan_->stages(pipe_stage_);
  if (layout.slots_size() != static_cast<int>(pipe_chunks_.size()))
    return InternalError("the plan gives stage " + std::to_string(pipe_stage_) + " " +
                         std::to_string(layout.slots_size()) + " model chunks; this rank has " +
                         std::to_string(pipe_chunks_.size()));
  // executor_ is chunk 0's first slot; each chunk's executors run its own graph over the one
  // parameter store of all the rank's chunks.
  std::vector<std::vector<exec::Executor*>> slots(pipe_chunks_.size());
  for (size_t c = 0; c < pipe_chunks_.size(); ++c) {
    exec::ExecutorOptions chunk = options;  // its own recompute segments
    DS_RETURN_IF_ERROR(SetRecompute(static_cast<int>(c), &chunk).status());
    for (int k = 0; k < layout.slots(static_cast<int>(c)); ++k) {
      if (c == 0 && k == 0) {
        slots[c].push_back(executor_.get());
        continue;
      }
      DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> e,
                          exec::Executor::Create(pipe_chunks_[c], params_.get(), chunk));
      slots[c].push_back(e.get());
      if (k == 0) micro_flops_ += e->forward_flops() + e->backward_flops();
      slot_executors_.push_back(std::move(e));
    }
  }
  pipe_compute_ = std::make_unique<PipelineCompute>(std::move(slots), batches_.get());
  return OkStatus();
}

// Outside the step plan, as ForwardWhole is for tensor parallelism: every rank walks the
// micro-batches in order, each of its chunks receiving its input from the previous virtual
// stage's rank and sending its output on (blocking, one link per direction), so the chain of
// virtual stages 0 .. p x v - 1 advances one hand-over at a time and no rank waits on a cycle.
StatusOr<double> Trainer::EvaluatePipeline(int64_t iters) {
  const int p = plan_->topology().pp(), cells = plan_->topology().dp() * plan_->topology().tp();
  const int column = world_rank_ % cells, v = static_cast<int>(pipe_chunks_.size());
  const int64_t micro = config_.train_micro_batch_size_per_gpu;
  for (int c = static_cast<int>(pipe_eval_.size()); c < v; ++c) {
    DS_ASSIGN_OR_RETURN(
        std::unique_ptr<exec::Executor> e,
        exec::Executor::Create(pipe_chunks_[c], params_.get(), {micro, seq_, /*training=*/false}));
    pipe_eval_.push_back(std::move(e));
  }
  auto move = [&](int from, int to, const std::vector<int>& tensors, exec::Executor* e,
                  bool send) -> Status {
    const std::string name = parallel::PipeLinkName(from * cells + column, to * cells + column);
    auto it = group_by_name_.find(name);
    if (it == group_by_name_.end())
      return InternalError("validation: no link " + name + " on rank " +
                           std::to_string(world_rank_));
    parallel::Communicator* link = it->second;
    for (int t : tensors) {
      const Tensor x = e->TensorData(t, false);
      const parallel::BufferView view(x.f32(), x.numel());
      auto h = send ? link->SendAsync(view, 1 - link->rank(), 0)
                    : link->RecvAsync(view, 1 - link->rank(), 0);
      DS_RETURN_IF_ERROR(h->Wait());
    }
    return OkStatus();
  };
  double sum = 0;
  int counted = 0;
  const int64_t n = micro * seq_;
  for (int64_t i = 0; i < iters; ++i) {
    exec::Executor* first = pipe_eval_[0].get();
    DS_RETURN_IF_ERROR(val_data_->Next(first->ids(), first->targets()));
    for (int c = 0; c < v; ++c) {
      exec::Executor* e = pipe_eval_[c].get();
      std::copy(first->ids(), first->ids() + n, e->ids());
      std::copy(first->targets(), first->targets() + n, e->targets());
      const int vs = c * p + pipe_stage_, prev = (pipe_stage_ + p - 1) % p;
      if (vs > 0) DS_RETURN_IF_ERROR(move(prev, pipe_stage_, pipe_io_[c].first, e, false));
      DS_RETURN_IF_ERROR(ForwardWhole(e, tp_ ? &pipe_tp_[c] : nullptr));
      if (vs < p * v - 1) {
        DS_RETURN_IF_ERROR(move(pipe_stage_, (pipe_stage_ + 1) % p, pipe_io_[c].second, e, true));
      } else {
        sum += e->loss();
        ++counted;
      }
    }
  }
  float sum_count[2] = {static_cast<float>(sum), static_cast<float>(counted)};
  DS_RETURN_IF_ERROR(
      world_host_comm_->AllReduce(parallel::BufferView(sum_count, 2), parallel::ReduceOp::kSum));
  return sum_count[1] > 0 ? sum_count[0] / sum_count[1] : 0.0;
}

}  // namespace ds::worker
