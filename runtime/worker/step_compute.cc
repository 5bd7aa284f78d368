// The step runner's compute: StepCompute's defaults (what a compute that does not override them
// refuses) and the real one, the executor over the data loader's micro-batches.
#include <memory>
#include <string>

#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/data_loader.h"
#include "runtime/exec/executor.h"
#include "runtime/worker/aux_losses.h"
#include "runtime/worker/step_runner.h"

namespace ds::worker {
namespace {

using proto::Instruction;

// The real compute: the executor over the data loader's micro-batches.
class ExecutorCompute final : public StepCompute {
 public:
  ExecutorCompute(exec::Executor* e, data::BatchSource* d) : e_(e), d_(d), aux_(e->graph()) {}
  Status LoadMicrobatch(const Instruction&) override { return d_->Next(e_->ids(), e_->targets()); }
  Status Forward(uint64_t seed, const Instruction& in) override {
    DS_RETURN_IF_ERROR(e_->ForwardNodes(seed, in.node_begin(), in.node_end()));
    if (in.computes_loss() && !aux_.empty()) {
      aux_.Clear();
      aux_.Add(*e_);
    }
    return OkStatus();
  }
  float loss() const override { return e_->loss() + aux_.loss_correction(); }
  double aux_sum() const override { return aux_.sum(); }
  int aux_count() const override { return aux_.count(); }
  Status Backward(float loss_grad, uint64_t seed, const Instruction& in) override {
    return e_->BackwardNodes(loss_grad, seed, in.node_begin(), in.node_end());
  }
  Status FinishGradients() override { return e_->FinishGradients(); }
  StatusOr<parallel::BufferView> TensorData(const Instruction&, int tensor, bool grad,
                                            int64_t count) override {
    return TensorView(e_->TensorData(tensor, grad), count,
                      "tensor " + std::to_string(tensor) + (grad ? "'s gradient" : ""));
  }
  StatusOr<float*> CheckpointSlice(const Instruction&, int tensor, int64_t count) override {
    return CheckpointSliceOf(e_, tensor, count);
  }
  Status StashCheckpoint(const Instruction&, int tensor) override {
    return e_->StashCheckpoint(tensor);
  }
  Status RestoreCheckpoint(const Instruction&, int tensor) override {
    return e_->RestoreCheckpoint(tensor);
  }

 private:
  exec::Executor* e_;
  data::BatchSource* d_;
  AuxLosses aux_;  // the routers' aux losses, of the last forward that computed the loss
};

}  // namespace

std::unique_ptr<StepCompute> MakeExecutorCompute(exec::Executor* executor,
                                                 data::BatchSource* data) {
  return std::make_unique<ExecutorCompute>(executor, data);
}

StatusOr<parallel::BufferView> StepCompute::TensorData(const Instruction&, int, bool, int64_t) {
  return UnimplementedError("this compute holds no tensors for a tensor-parallel all-reduce");
}

StatusOr<parallel::BufferView> TensorView(const Tensor& t, int64_t count, const std::string& what) {
  if (!t.defined() || (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16) || t.numel() != count)
    return InvalidArgumentError("the plan moves " + std::to_string(count) + " values of " + what +
                                ", which the executor does not hold as fp32 or bf16 values of "
                                "that count");
  return parallel::BufferView(t.data(), count, t.dtype());
}

StatusOr<float*> CheckpointSliceOf(exec::Executor* e, int tensor, int64_t count) {
  const Tensor t = e->CheckpointSlice(tensor);
  if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != count)
    return InvalidArgumentError("the plan all-gathers " + std::to_string(count) +
                                "-element fp32 slices of checkpoint " + std::to_string(tensor) +
                                ", which the executor does not keep as such");
  return t.f32();
}

StatusOr<float*> StepCompute::CheckpointSlice(const Instruction&, int, int64_t) {
  return UnimplementedError("this compute keeps no partitioned checkpoints");
}
Status StepCompute::RestoreCheckpoint(const Instruction&, int) {
  return UnimplementedError("this compute keeps no checkpoints in host memory");
}
Status StepCompute::StashCheckpoint(const Instruction&, int) {
  return UnimplementedError("this compute keeps no partitioned checkpoints");
}
Status StepCompute::BackwardInput(float, uint64_t, const Instruction&) {
  return UnimplementedError("this compute runs no split backward (zero-bubble schedules)");
}
Status StepCompute::BackwardWeight(uint64_t, const Instruction&) {
  return UnimplementedError("this compute runs no split backward (zero-bubble schedules)");
}

}  // namespace ds::worker
