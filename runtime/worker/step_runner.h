// StepRunner: the interpreter of one rank's step plan (proto/plan.proto, made by the step
// planner). Each instruction kind has one handler: load a micro-batch, forward or backward a
// block range, reduce a gradient bucket, reduce the gradient norm and the overflow flag, step
// the optimizer on the owned shard, all-gather updated parameters, zero gradients. The runner
// decides nothing: what runs when comes from the plan, so every rank issues the same
// collectives in the same order by construction.
//
// Gradients are averaged over the data-parallel ranks by seeding backward with
// dL/dloss = loss_scale / (gas * dp) and summing in the collectives.
//
// Besides the plan's collectives, every rank all-reduces two scalars at the end of a step for
// the metrics (the mean loss; and the gradient norm when the plan has no norm reduction because
// clipping is off): the same calls in the same order on every rank.
//
// Not thread-safe; one thread drives it (collectives run on the communicator's thread).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/base/status.h"

namespace ds {

namespace proto {
class Plan;
}
namespace parallel {
class Communicator;
}
class Executor;
class ParamStore;
class Optimizer;
class DataLoader;
class LossScaler;
class LrSchedule;

struct StepParts {
  Executor* executor = nullptr;
  ParamStore* params = nullptr;
  Optimizer* optimizer = nullptr;   // owns OwnedRange(plan, rank)
  DataLoader* data = nullptr;
  LossScaler* scaler = nullptr;
  const LrSchedule* schedule = nullptr;
  parallel::Communicator* comm = nullptr;  // the data-parallel group
  float max_grad_norm = 0;           // 0: no clipping
  bool fp16 = false;
  uint64_t seed = 0;
  int loss_block = 0;                // the graph's num_blocks: the block that computes the loss
};

struct StepResult {
  double loss = 0;       // mean over this rank's micro-batches and the dp ranks
  double grad_norm = 0;  // global, unscaled, before clipping
  double lr = 0;
  bool skipped = false;  // fp16 overflow on some rank
};

class StepRunner {
 public:
  // `plan` must outlive the runner. Errors when the plan is not for this rank or uses an
  // instruction this runner does not run yet.
  static StatusOr<std::unique_ptr<StepRunner>> Create(const proto::Plan* plan, int rank,
                                                      const StepParts& parts);
  ~StepRunner();

  // Runs optimizer step `step` (0-based): every instruction of this rank, in order.
  StatusOr<StepResult> Run(int64_t step);

  // The flat element range this rank's optimizer owns: [first, second).
  static std::pair<int64_t, int64_t> OwnedRange(const proto::Plan& plan, int rank,
                                                int64_t total_elements);

 private:
  struct Impl;
  explicit StepRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
