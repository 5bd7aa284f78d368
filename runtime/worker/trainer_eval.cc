// The Trainer's evaluation: the mean validation loss over `iters` global batches, each rank
// its data-parallel share, averaged over the ranks (EvaluatePipeline: trainer_pipe.cc).
#include <algorithm>

#include "parallel/comm/communicator.h"
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

}  // namespace ds::worker
