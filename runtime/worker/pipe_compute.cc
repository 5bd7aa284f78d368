#include "runtime/worker/pipe_compute.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"

namespace ds::worker {

namespace {

// Adds the wall milliseconds of its scope to `ms`.
class Timed {
 public:
  explicit Timed(double* ms) : ms_(ms), t0_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    *ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  double* ms_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

PipelineCompute::PipelineCompute(std::vector<std::vector<exec::Executor*>> executors,
                                 data::BatchSource* data)
    : ex_(std::move(executors)), data_(data) {
  for (const auto& chunk : ex_) aux_.emplace_back(chunk.at(0)->graph());
}

double PipelineCompute::TakeComputeMs() { return std::exchange(compute_ms_, 0.0); }

StatusOr<exec::Executor*> PipelineCompute::For(const proto::Instruction& in) const {
  if (in.chunk() < 0 || in.chunk() >= static_cast<int>(ex_.size()) || in.slot() < 0 ||
      in.slot() >= static_cast<int>(ex_[in.chunk()].size()))
    return FailedPreconditionError("the plan's " + proto::Instruction::Kind_Name(in.kind()) +
                                   " names chunk " + std::to_string(in.chunk()) + " slot " +
                                   std::to_string(in.slot()) + "; this stage has " +
                                   std::to_string(ex_.size()) + " chunk(s) of " +
                                   std::to_string(ex_.empty() ? 0 : ex_[0].size()) + " slot(s)");
  return ex_[in.chunk()][in.slot()];
}

Status PipelineCompute::LoadMicrobatch(const proto::Instruction& in) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  const int micro = in.micro_batch();
  if (micro == 0) tokens_.clear();
  if (micro != static_cast<int>(tokens_.size()))
    return FailedPreconditionError("the plan loads micro-batch " + std::to_string(micro) +
                                   " after " + std::to_string(tokens_.size()) +
                                   "; a stage reads them in order");
  const int64_t n = e->batch() * e->seq();
  std::vector<int32_t>& t = tokens_.emplace_back(2 * n);
  return data_->Next(t.data(), t.data() + n);
}

Status PipelineCompute::Forward(uint64_t seed, const proto::Instruction& in) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  const int micro = in.micro_batch();
  if (micro < 0 || micro >= static_cast<int>(tokens_.size()))
    return FailedPreconditionError("the plan runs the forward of micro-batch " +
                                   std::to_string(micro) + " before loading it");
  const int64_t n = e->batch() * e->seq();
  const std::vector<int32_t>& t = tokens_[micro];
  std::copy(t.begin(), t.begin() + n, e->ids());
  std::copy(t.begin() + n, t.end(), e->targets());
  Timed timed(&compute_ms_);
  DS_RETURN_IF_ERROR(e->ForwardNodes(seed, in.node_begin(), in.node_end()));
  if (in.computes_loss()) {  // the loss, or a part of it: the stage's MoE aux terms
    aux_chunk_ = in.chunk();
    aux_[aux_chunk_].Clear();
    aux_[aux_chunk_].Add(*e);
    loss_ = e->loss() + aux_[aux_chunk_].loss_correction();
  }
  return OkStatus();
}

Status PipelineCompute::Backward(float loss_grad, uint64_t seed, const proto::Instruction& in) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  Timed timed(&compute_ms_);
  return e->BackwardNodes(loss_grad, seed, in.node_begin(), in.node_end());
}

Status PipelineCompute::BackwardInput(float loss_grad, uint64_t seed,
                                      const proto::Instruction& in) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  Timed timed(&compute_ms_);
  return e->BackwardNodes(loss_grad, seed, in.node_begin(), in.node_end(),
                          exec::BackwardPart::kInput);
}

Status PipelineCompute::BackwardWeight(uint64_t seed, const proto::Instruction& in) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  Timed timed(&compute_ms_);
  return e->BackwardNodes(0, seed, in.node_begin(), in.node_end(), exec::BackwardPart::kWeight);
}

Status PipelineCompute::FinishGradients() {
  for (const auto& chunk : ex_)
    for (exec::Executor* e : chunk) DS_RETURN_IF_ERROR(e->FinishGradients());
  return OkStatus();
}

StatusOr<float*> PipelineCompute::CheckpointSlice(const proto::Instruction& in, int tensor,
                                                  int64_t count) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  return CheckpointSliceOf(e, tensor, count);
}

Status PipelineCompute::StashCheckpoint(const proto::Instruction& in, int tensor) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  return e->StashCheckpoint(tensor);
}

Status PipelineCompute::RestoreCheckpoint(const proto::Instruction& in, int tensor) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  return e->RestoreCheckpoint(tensor);
}

StatusOr<parallel::BufferView> PipelineCompute::TensorData(const proto::Instruction& in, int tensor,
                                                           bool grad, int64_t count) {
  DS_ASSIGN_OR_RETURN(exec::Executor * e, For(in));
  return TensorView(e->TensorData(tensor, grad), count,
                    "tensor " + std::to_string(tensor) + (grad ? "'s gradient" : "") + " (chunk " +
                        std::to_string(in.chunk()) + ", slot " + std::to_string(in.slot()) + ")");
}

}  // namespace ds::worker
