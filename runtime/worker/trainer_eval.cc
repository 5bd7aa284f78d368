// The Trainer's evaluation: the mean validation loss over `iters` global batches, each rank
// its data-parallel share, averaged over the ranks; outside the step plan, a whole forward with
// the tp, ep and sp collectives at the cut points (ForwardWhole), and a pipeline's micro-batches
// through the virtual stages in order (EvaluatePipeline).
#include <algorithm>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipe_streams.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/train_source.h"
#include "runtime/exec/executor.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/cpu_matmul.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer_swapper.h"

namespace ds::worker {

StatusOr<double> Trainer::Evaluate(int64_t iters) {
  if (!config_.data.has_validation())
    return FailedPreconditionError(config_.source + ": data.validation is not set");
  const int64_t micro = config_.train_micro_batch_size_per_gpu;
  // ZeRO-3 with the states on the device: every unit is gathered on the host copies and the
  // evaluation executor uploads them whole (it keeps a full parameter copy on the device).
  const bool host_gather = device_states_ && params_->params_partitioned();
  if (!eval_executor_ && part_->stage < 0) {
    exec::ExecutorOptions eo{micro, seq_, false, device_memory_};
    eo.matmul = CpuMatmulDtype(config_);
    eo.state = state_views_;  // the per-token inputs (packed documents' masks)
    eo.frozen = frozen_.get();
    if (device_states_ && !host_gather)
      eo.device_params = device_states_->params();  // read in place
    DS_ASSIGN_OR_RETURN(eval_executor_, exec::Executor::Create(graph_, params_.get(), eo));
  }
  if (!val_data_) {
    DS_ASSIGN_OR_RETURN(val_data_, OpenValidationData(micro, iters));
  }
  val_data_->Reset();
  // Each of the `iters` evaluation batches is a global batch: this rank's share of it is gas
  // micro-batches, and the mean is taken over every rank (as Megatron's evaluate).
  const int64_t micro_batches = iters * std::max<int64_t>(1, config_.gradient_accumulation_steps);
  if (part_->stage >= 0) return EvaluatePipeline(micro_batches);  // ZeRO 0-2 on the host
  if (host_gather) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());  // offload_param nvme
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());            // stage 3
  double sum = 0;
  Status status;
  for (int64_t i = 0; i < micro_batches && status.ok(); ++i) {
    status = val_data_->Next(eval_executor_->ids(), eval_executor_->targets());
    if (status.ok()) batches_->ApplyMasks(eval_executor_->ids(), eval_executor_->targets());
    if (status.ok())
      status = ForwardWhole(eval_executor_.get(), part_->tp ? part_->tp.get() : part_->local.get());
    if (status.ok()) sum += eval_executor_->loss();
  }
  runner_->ReleaseGatheredParams();
  if (swapper_) swapper_->DropParams();
  if (host_gather) device_states_->ReleaseHostCopies();
  DS_RETURN_IF_ERROR(status);
  // Ranks of one data-parallel share (tensor, sequence, expert) hold the same loss: the
  // world's mean is the data-parallel mean.
  float sum_count[2] = {static_cast<float>(sum), static_cast<float>(micro_batches)};
  DS_RETURN_IF_ERROR(
      world_host_comm_->AllReduce(parallel::BufferView(sum_count, 2), parallel::ReduceOp::kSum));
  return sum_count[0] / std::max(1.0f, sum_count[1]);
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
