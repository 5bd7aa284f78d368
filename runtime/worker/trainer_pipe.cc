// The Trainer's pipeline-parallel part: the executors of its stage's activation slots under one
// PipelineCompute (the stage's graph is the plan's cut, runtime/planner/rank_cut.h), and
// validation through the virtual stages.
#include <algorithm>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipe_streams.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/pipe_compute.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

Status Trainer::BuildPipelineCompute(const exec::ExecutorOptions& options) {
  const proto::StageLayout& layout = plan_->stages(part_->stage);
  if (layout.slots_size() != static_cast<int>(part_->chunks.size()))
    return InternalError("the plan gives stage " + std::to_string(part_->stage) + " " +
                         std::to_string(layout.slots_size()) + " model chunks; this rank has " +
                         std::to_string(part_->chunks.size()));
  // executor_ is chunk 0's first slot; each chunk's executors run its own graph over the one
  // parameter store of all the rank's chunks.
  std::vector<std::vector<exec::Executor*>> slots(part_->chunks.size());
  for (size_t c = 0; c < part_->chunks.size(); ++c) {
    exec::ExecutorOptions chunk = options;  // its own recompute segments
    DS_RETURN_IF_ERROR(SetRecompute(static_cast<int>(c), &chunk).status());
    for (int k = 0; k < layout.slots(static_cast<int>(c)); ++k) {
      if (c == 0 && k == 0) {
        slots[c].push_back(executor_.get());
        continue;
      }
      DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> e,
                          exec::Executor::Create(part_->chunks[c], params_.get(), chunk));
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
  const int column = world_rank_ % cells, v = static_cast<int>(part_->chunks.size());
  const int64_t micro = config_.train_micro_batch_size_per_gpu;
  for (int c = static_cast<int>(pipe_eval_.size()); c < v; ++c) {
    DS_ASSIGN_OR_RETURN(
        std::unique_ptr<exec::Executor> e,
        exec::Executor::Create(part_->chunks[c], params_.get(), {micro, seq_, /*training=*/false}));
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
      const int vs = c * p + part_->stage, prev = (part_->stage + p - 1) % p;
      if (vs > 0) DS_RETURN_IF_ERROR(move(prev, part_->stage, part_->io[c].first, e, false));
      DS_RETURN_IF_ERROR(ForwardWhole(e, part_->tp ? &part_->chunk_tp[c] : nullptr));
      if (vs < p * v - 1) {
        DS_RETURN_IF_ERROR(
            move(part_->stage, (part_->stage + 1) % p, part_->io[c].second, e, true));
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
