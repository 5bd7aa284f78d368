// StepRunner: the interpreter of one rank's step plan (proto/plan.proto, made by the step
// planner). Each instruction kind has one handler: load a micro-batch, forward or backward a
// block range, reduce a gradient bucket, reduce the gradient norm and the overflow flag, step
// the optimizer on the owned shard, all-gather updated parameters, zero gradients. The runner
// decides nothing: what runs when comes from the plan, so every rank issues the same
// collectives in the same order by construction.
//
// ZeRO: the ParamStore is sharded with LayoutFor(plan, rank) before the optimizer is made;
// stage 2 keeps reduced gradients in the store's gradient shard, stage 3 gathers units into
// the flat parameters before use and releases them after (Note [Collectives of the step
// runner] in step_runner.cc).
//
// Gradients are averaged over the data-parallel ranks by seeding backward with
// dL/dloss = loss_scale / (gas * dp) and summing in the collectives.
//
// Besides the plan's collectives, every rank all-reduces two scalars at the end of a step for
// the metrics (the mean loss; and the gradient norm when the plan has no norm reduction because
// clipping is off): the same calls in the same order on every rank.
//
// With StepParts::device (the plan's states_on_device) the same instructions act on the
// device's model states: ZERO_GRADS, GRAD_NORM_REDUCE's local sum and OPTIMIZER_STEP run on
// the device. With a communicator on device buffers (NCCL) the collectives read and write the
// device's buffers (Note [ZeRO-3 on a device] for stage 3); with a host one (Gloo, stages 0-2)
// a reduction copies its bucket to the host ParamStore, reduces it there and copies the result
// back, and the shard all-gather does the same with the updated partition. One rank moves
// nothing but ZeRO-2/3's gradient shard and ZeRO-3's gathers, as device copies. Collectives on
// host memory (scalars, staged data) always go to StepParts::host_comm.
//
// Not thread-safe; one thread drives it (collectives run on the communicator's thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/exec/param_store.h"

namespace ds {

namespace proto {
class Plan;
}
namespace parallel {
class Communicator;
}
class Executor;
class Optimizer;
class DataLoader;
class LossScaler;
class LrSchedule;
class DeviceStates;

struct StepParts {
  Executor* executor = nullptr;
  ParamStore* params = nullptr;
  Optimizer* optimizer = nullptr;   // over `params`, sharded with LayoutFor(plan, rank)
  DataLoader* data = nullptr;
  LossScaler* scaler = nullptr;
  const LrSchedule* schedule = nullptr;
  parallel::Communicator* comm = nullptr;  // the data-parallel group
  // The same ranks for collectives on host memory (scalars, staged data) when `comm` works on
  // device buffers (NCCL); null: `comm` does both.
  parallel::Communicator* host_comm = nullptr;
  float max_grad_norm = 0;           // 0: no clipping
  bool fp16 = false;
  uint64_t seed = 0;
  int loss_block = 0;                // the graph's num_blocks: the block that computes the loss
  bool memory_profile = false;       // sample resident model-state bytes after each instruction
  // The plan's states_on_device: the model states live here (the executor borrows its flat
  // parameters and gradients), the norm and the optimizer step run on the device, and
  // collectives stage the ranges they move through the host ParamStore.
  DeviceStates* device = nullptr;
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

  // What rank `rank` owns under the plan's partition (ParamStore::Shard's argument):
  // everything at stage 0; its chunk of the flat buffer at stages 1-2; its chunk of every
  // partition unit, in shard space, at stage 3.
  static ShardLayout LayoutFor(const proto::Plan& plan, int rank, int64_t total_elements);

  // Stage 3, outside a step (evaluation, export): gathers every partitioned unit into the
  // flat parameters (a collective: all ranks call it), and releases them again. No-ops at
  // stages 0-2.
  Status GatherAllParams();
  void ReleaseGatheredParams();

  // With StepParts::memory_profile: the peak resident bytes of the model states seen so far
  // (parameters, gradients, fp32 master, optimizer state; staging of collectives apart),
  // beside the plan's model-state bytes for this rank. One line.
  std::string MemoryReport() const;

  // With DS_PROFILE_OPS=1: wall milliseconds per instruction kind over all steps run,
  // including the waits for async collectives charged to the instruction that waits.
  const std::map<std::string, double>& InstructionProfile() const;

 private:
  struct Impl;
  explicit StepRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
