// The Trainer's inference side: executors without gradients and generators over the same
// parameters (evaluation, ds-generate, RLHF rollouts), and the hybrid engine's switch between
// the training layout and the whole model.
#include <algorithm>
#include <string>

#include "parallel/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/generate/generator.h"
#include "runtime/graph/validate.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer.h"
#include "zero/device_states.h"
#include "zero/optimizer_swapper.h"

namespace ds::worker {

// The hybrid engine's switch: every parameter whole in the host store (ZeRO-3 all-gathered,
// NVMe-offloaded ones read, device states downloaded), and back to the training layout.
Status Trainer::GatherParams() {
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  return runner_->GatherAllParams();
}

void Trainer::ReleaseParams() {
  runner_->ReleaseGatheredParams();
  if (swapper_) swapper_->DropParams();
}

StatusOr<std::unique_ptr<exec::Executor>> Trainer::MakeInferenceExecutor(int64_t batch,
                                                                         int64_t seq) {
  if (tp_ || pipe_stage_ >= 0)
    return UnimplementedError(config_.source +
                              ": generation from a tensor- or pipeline-parallel model "
                              "(parallel.tensor or parallel.pipeline > 1) is not written yet");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());  // stage 3: stays gathered
  // Expert parallelism: the other ranks' experts gathered first (every rank joins).
  zero::ParamStore* params = params_.get();
  if (sliced_) {
    DS_ASSIGN_OR_RETURN(params, GatherWholeModel());
  }
  // Every rank holds every parameter: it generates with the whole model, alone.
  const Graph& g = rank_graph_ ? full_graph_ : graph_;
  exec::ExecutorOptions o{batch, seq, false};
  // Per-token inputs (PPO's heads): zeroed buffers of this executor's shape; its losses then
  // count nothing, and the caller reads the logits or values.
  DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs,
                      InferTensorSpecs(g, {{"batch", batch}, {"seq", seq}}, g.name));
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (g.tensors[t].role != TensorRole::kState) continue;
    std::vector<float>& buf = inference_state_.emplace_back(specs[t].numel(), 0.0f);
    o.state[g.tensors[t].name] = Tensor(buf.data(), specs[t].shape, specs[t].dtype);
  }
  return exec::Executor::Create(g, params, o);
}

StatusOr<std::unique_ptr<generate::Generator>> Trainer::MakeGenerator(int64_t max_batch,
                                                                      int64_t max_len) {
  const int ep = std::max(1, plan_->topology().ep());
  if (pipe_stage_ >= 0 || (tp_ && ep > 1))
    return UnimplementedError(config_.source +
                              ": generation from a pipeline-parallel model, or a tensor-parallel "
                              "one with expert parallelism, is not written yet");
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Download());
  if (swapper_) DS_RETURN_IF_ERROR(swapper_->LoadParams());
  DS_RETURN_IF_ERROR(runner_->GatherAllParams());  // stage 3: stays gathered
  generate::GeneratorOptions o{max_batch, max_len};
  zero::ParamStore* params = params_.get();
  if (tp_) {  // each tp rank its heads and vocabulary rows, over its tp group
    o.tp = std::max(1, plan_->topology().tp());
    o.tp_rank = tp_rank_;
    o.tp_comm = tp_comm_;
  } else if (sliced_) {  // expert parallelism: the other ranks' experts gathered first
    DS_ASSIGN_OR_RETURN(params, GatherWholeModel());
  }
  return generate::Generator::Create(tp_ || rank_graph_ ? full_graph_ : graph_, params, o);
}

}  // namespace ds::worker
