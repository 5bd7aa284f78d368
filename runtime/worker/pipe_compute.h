// PipelineCompute: a pipeline stage's StepCompute. One Executor per model chunk and activation
// slot (the micro-batches the plan keeps in flight, Instruction.chunk / slot), all over the one
// ParamStore(s) of the rank's stage graphs, so gradients of every micro-batch accumulate there
// in the plan's order. LOAD_MICROBATCH reads the next micro-batch of the data loader (every
// stage reads the same sequence: the first needs the ids, the last the targets) and keeps its
// tokens for the step; each FORWARD puts its micro-batch's tokens into the executor it runs (an
// interleaved rank's chunks run one micro-batch at different times).
//
//   PipelineCompute compute({{slot0.get(), slot1.get()}}, loader.get());
//   parts.compute = &compute;   // StepParts
//
// Not thread-safe, like the executors.
#pragma once

#include <vector>

#include "runtime/data/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/worker/aux_losses.h"
#include "runtime/worker/step_runner.h"

namespace ds::worker {

class PipelineCompute final : public StepCompute {
 public:
  // executors[chunk][slot], borrowed.
  PipelineCompute(std::vector<std::vector<exec::Executor*>> executors, data::BatchSource* data);

  Status LoadMicrobatch(const proto::Instruction& in) override;
  Status Forward(uint64_t seed, const proto::Instruction& in) override;
  float loss() const override { return loss_; }
  double aux_sum() const override { return aux_.at(aux_chunk_).sum(); }
  int aux_count() const override { return aux_.at(aux_chunk_).count(); }
  Status Backward(float loss_grad, uint64_t seed, const proto::Instruction& in) override;
  // zb-h1: the executors were made with split_backward.
  Status BackwardInput(float loss_grad, uint64_t seed, const proto::Instruction& in) override;
  Status BackwardWeight(uint64_t seed, const proto::Instruction& in) override;
  Status FinishGradients() override;
  StatusOr<parallel::BufferView> TensorData(const proto::Instruction& in, int tensor, bool grad,
                                            int64_t count) override;
  StatusOr<float*> CheckpointSlice(const proto::Instruction& in, int tensor,
                                   int64_t count) override;
  Status StashCheckpoint(const proto::Instruction& in, int tensor) override;
  Status RestoreCheckpoint(const proto::Instruction& in, int tensor) override;

  // Milliseconds spent in the executors' forwards and backwards since the last call.
  double TakeComputeMs();

 private:
  StatusOr<exec::Executor*> For(const proto::Instruction& in) const;

  std::vector<std::vector<exec::Executor*>> ex_;
  data::BatchSource* data_;
  std::vector<std::vector<int32_t>> tokens_;  // per micro-batch of the step: ids, then targets
  float loss_ = 0;                            // of the last forward that computed one
  std::vector<AuxLosses> aux_;                // per chunk: its MoE layers' aux losses
  int aux_chunk_ = 0;                         // and the chunk of that forward
  double compute_ms_ = 0;
};

}  // namespace ds::worker
