// StepRunner: the interpreter of one rank's step plan (proto/plan.proto, made by the step
// planner). A table maps each instruction kind to one handler: load a micro-batch, forward or
// backward a block range, the ZeRO collectives (zero/zero_collectives.h), release gathered
// units, reduce the gradient norm, the overflow flag and the loss, step the optimizer, zero
// gradients. The runner decides nothing: what runs when, on which memory and over which
// communicator comes from the plan's fields (kind, placement, staging, wait_for), so every
// rank issues the same collectives in the same order by construction.
//
// Gradients are averaged over the data-parallel ranks by seeding backward with
// dL/dloss = loss_scale / (gas * dp) and summing in the collectives.
//
// Not thread-safe; one thread drives it (collectives run on the communicator's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/core/tensor.h"
#include "runtime/worker/comms_logger.h"
#include "zero/param_store.h"

namespace ds {
namespace proto {
class Instruction;
class Plan;
}  // namespace proto
namespace parallel {
class Communicator;
}
namespace exec {
class Executor;
}
namespace data {
class BatchSource;
}
namespace optim {
class LossScaler;
class LrSchedule;
}  // namespace optim
namespace zero {
class DeviceStates;
class Optimizer;
class OptimizerSwapper;
}  // namespace zero
}  // namespace ds

namespace ds::worker {

class PlanBeacon;

// What the runner needs of compute and data, so that tests can run hand-made plans against a
// fake (step_runner_test.cc). StepParts::executor and ::data make the real one.
class StepCompute {
 public:
  virtual ~StepCompute() = default;
  // The next micro-batch, into the activation slot (and model chunk) `in` names (pipeline
  // parallelism keeps several in flight; otherwise slot 0).
  virtual Status LoadMicrobatch(const proto::Instruction& in) = 0;
  // The node range of a FORWARD / BACKWARD instruction (its blocks and node_begin / node_end).
  virtual Status Forward(uint64_t seed, const proto::Instruction& range) = 0;
  virtual float loss() const = 0;  // of the last forward that computed the loss
  // The MoE routers' load-balancing (aux) losses in that forward: their sum and how many (none
  // for a dense model; a pipeline stage's, its own layers').
  virtual double aux_sum() const { return 0; }
  virtual int aux_count() const { return 0; }
  virtual Status Backward(float loss_grad, uint64_t seed, const proto::Instruction& range) = 0;
  // Zero-bubble schedules: a backward's activation-gradient half (BACKWARD_INPUT) and, later,
  // its parameter-gradient half (BACKWARD_WEIGHT). Unimplemented unless overridden.
  virtual Status BackwardInput(float loss_grad, uint64_t seed, const proto::Instruction& range);
  virtual Status BackwardWeight(uint64_t seed, const proto::Instruction& range);
  // Gradients still on their way from a device land in the ParamStore.
  virtual Status FinishGradients() = 0;
  // Host memory of a tensor's value or gradient in the chunk and slot `in` names, as the executor
  // stores it (fp32, or bf16 under bf16 mixed precision): what an ACT_ALL_REDUCE (tensor
  // parallelism) works on, or a SEND / RECV (pipeline) moves.
  virtual StatusOr<parallel::BufferView> TensorData(const proto::Instruction& in, int tensor,
                                                    bool grad, int64_t count);
  // partition_activations: the rank's slice of a partitioned checkpoint (CHECKPOINT_RESTORE's
  // source), and the copy of that slice out of the tensor forward wrote (CHECKPOINT_STASH), in
  // the chunk and slot `in` names.
  virtual StatusOr<float*> CheckpointSlice(const proto::Instruction& in, int tensor, int64_t count);
  virtual Status StashCheckpoint(const proto::Instruction& in, int tensor);
  // cpu_checkpointing: the kept copy (host memory) back into the tensor on the device.
  virtual Status RestoreCheckpoint(const proto::Instruction& in, int tensor);
};

// The real compute (step_compute.cc): the executor over the data loader's micro-batches, what
// the runner makes when StepParts::compute is null.
std::unique_ptr<StepCompute> MakeExecutorCompute(exec::Executor* executor, data::BatchSource* data);

// Executor tensor `t` as a communication buffer of `count` floating-point values (fp32 or bf16):
// what a StepCompute's TensorData returns; InvalidArgument naming `what` otherwise.
StatusOr<parallel::BufferView> TensorView(const Tensor& t, int64_t count, const std::string& what);

// The executor's slice of partitioned checkpoint `tensor`, checked to be `count` fp32 values:
// what a StepCompute's CheckpointSlice returns.
StatusOr<float*> CheckpointSliceOf(exec::Executor* e, int tensor, int64_t count);

struct StepParts {
  StepCompute* compute = nullptr;  // null: the executor and the data loader below
  exec::Executor* executor = nullptr;
  zero::ParamStore* params = nullptr;
  zero::Optimizer* optimizer = nullptr;  // over `params`, sharded with LayoutFor(plan, rank)
  data::BatchSource* data = nullptr;
  optim::LossScaler* scaler = nullptr;
  const optim::LrSchedule* schedule = nullptr;
  parallel::Communicator* comm = nullptr;  // the data-parallel group
  // Host communicators of every other group of the plan this rank is in (tensor parallelism:
  // its tp group and "world"), by ProcessGroup name.
  std::map<std::string, parallel::Communicator*> groups;
  // The same ranks for collectives on host memory (scalars, staged data) when `comm` works on
  // device buffers (NCCL); null: `comm` does both.
  parallel::Communicator* host_comm = nullptr;
  float max_grad_norm = 0;  // 0: no clipping
  uint64_t seed = 0;
  bool memory_profile = false;  // sample resident model-state bytes after each instruction
  // wall_clock_breakdown: time every instruction (InstructionProfile), as DS_PROFILE_OPS=1 does
  // without waiting for the device after each.
  bool time_instructions = false;
  // comms_logger: every collective completed as soon as it is issued, timed and recorded here
  // (borrowed; null: off); verbose lines go to stdout.
  CommsLogger* comms = nullptr;
  // The plan's states_on_device: the model states live here (the executor borrows its flat
  // parameters and gradients); the plan's placements say what runs on them.
  zero::DeviceStates* device = nullptr;
  // offload_optimizer nvme: the plan's SWAP_IN / SWAP_OUT and sub-group steps run on it.
  zero::OptimizerSwapper* swapper = nullptr;
  // DS_PROFILE_OPS: waits for the device's queued work after each instruction (null: none).
  std::function<Status()> synchronize;
};

struct StepResult {
  double loss = 0;       // mean over this rank's micro-batches and the dp ranks
  double moe_aux = 0;    // the same mean of StepCompute::aux (1 for perfectly balanced experts)
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

  // Stage 3, outside a step (evaluation, export): gathers every partitioned unit into the
  // flat parameters (a collective: all ranks call it), and releases them again. No-ops at
  // stages 0-2.
  Status GatherAllParams();
  // Outside a step, after the 16-bit parameters of this rank's shard were rewritten from its
  // master (a restore): runs the step's ALL_GATHER instructions, which give every rank the
  // others' parts (stages 1-2). A collective: all ranks call it.
  Status GatherUpdatedParams();
  void ReleaseGatheredParams();
  // Stage 3: the flat (offset, count) ranges of the persistent units, which stay gathered.
  const std::vector<std::pair<int64_t, int64_t>>& PersistentRanges() const;
  // The same for some of the plan's partition units (ZeroCollectives::GatherUnits).
  Status GatherParamUnits(const std::vector<int>& units);
  void ReleaseParamUnits(const std::vector<int>& units);

  // With StepParts::memory_profile: the peak resident bytes of the model states seen so far
  // (parameters, gradients, fp32 master, optimizer state; staging of collectives apart),
  // beside the plan's model-state bytes for this rank. One line.
  std::string MemoryReport() const;
  // Where the rank is in its plan (plan_beacon.h): each instruction marked before it runs.
  PlanBeacon& beacon();

  // With DS_PROFILE_OPS=1 or StepParts::time_instructions: wall milliseconds per instruction
  // kind over all steps run, including the waits for async collectives charged to the
  // instruction that waits.
  const std::map<std::string, double>& InstructionProfile() const;

 private:
  struct Impl;
  explicit StepRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::worker
