// DeviceStates: one rank's model states resident in a DeviceMemory, for training with the
// optimizer on the device (the plan's states_on_device: device.type cuda without
// offload_optimizer, as DeepSpeed steps on the GPU unless told to offload). Laid out as the
// ParamStore is:
//
//   params   model dtype, what forward and backward read: flat (stages 0-2; fp32: also the
//            master), or at stage 3 the gather arena (zero/plan/bucket_arena.h) where each
//            partition unit is gathered before use (persistent units stay)
//   pshard   stage 3, mixed precision: the rank's model-dtype parameter shard (in fp32 the
//            master shard is the parameter shard)
//   grads    model dtype, what backward accumulates into: flat (stages 0-1), or the plan's
//            gradient bucket arena (stage 2), mirroring ParamStore::grad_storage()
//   shard    stage 2: the reduced gradients of the rank's partition, model dtype
//   master   mixed precision: fp32, in the rank's shard space (ZeRO-1/2: its partition only)
//   m, v     Adam's moments (SGD: m, the momentum buffer), in shard space
//
// The optimizer step (fused AdamW/Adam that writes the 16-bit copy) and the gradient norm
// run on the device (OptimizerKernels); nothing crosses to the host in a step of one rank.
// Data-parallel collectives move the bucket they reduce and the partition they gather
// through the host ParamStore (GradsToHost / ParamsFromHost ...) where the communicator is
// a host one (Gloo).
//
// The host ParamStore and Optimizer stay what checkpoints read and write: Upload() after
// initializing or loading them, Download() before saving or exporting. ZeRO stages 0-3;
// fp32, bf16 and fp16 (loss scaling: the norm's non-finite flag skips the step); AdamW, Adam
// and SGD with momentum, as zero/optimizer.h defines them.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/core/device_memory.h"
#include "runtime/core/optimizer_kernels.h"
#include "zero/optimizer.h"
#include "zero/param_store.h"

namespace ds::zero {

// Stage 3: where partition unit [flat_begin, flat_begin + count) is gathered on the device.
struct DeviceParamBlock {
  int64_t flat_begin = 0;
  int64_t count = 0;
  int64_t arena_offset = 0;  // elements
  bool persistent = false;   // never released: uploaded and downloaded with the shards
};

class DeviceStates {
 public:
  // `memory`, `params` (sharded already) and `optimizer` (over `params`) are borrowed and
  // must outlive this. Stage 3 needs `param_blocks` (ascending, one per unit) and the arena's
  // size. Unimplemented, with the reason, for what does not run on the device.
  static StatusOr<std::unique_ptr<DeviceStates>> Create(
      DeviceMemory* memory, ParamStore* params, Optimizer* optimizer,
      std::vector<DeviceParamBlock> param_blocks = {}, int64_t param_arena_elements = 0);

  // The flat parameters (stages 0-2): ParamStore::total_elements() model-dtype elements.
  void* params() const { return params_.data(); }
  // Where the parameter of flat element `i` is read (one unit's elements contiguous from
  // there; stage 3: valid while its unit is gathered).
  void* ParamAt(int64_t i) const;
  // Stage 3: the parameter shard at shard position `pos` (model dtype).
  void* ParamShardAt(int64_t pos) const;
  // The gradient of flat element `i`; one parameter's (one bucket's) are contiguous from there.
  void* GradAt(int64_t i) const;
  DeviceMemory* memory() const { return memory_; }
  // Bytes of device memory held (params, grads, master, m, v).
  int64_t bytes() const;

  // Host ParamStore (model copy, master) and Optimizer state -> device.
  Status Upload();
  // Device -> host ParamStore (model copy, master; marks it changed) and Optimizer state.
  Status Download();
  // With a sparse_host ParamStore: hands the host copies' pages back (Upload does it at the
  // end); call after a checkpoint or export has read what Download wrote.
  void ReleaseHostCopies();

  // Zeroes the gradients and the gradient shard.
  Status ZeroGrads();
  // Zeroes the gradients of flat elements [lo, lo + n) (one bucket, once reduced).
  Status ZeroGradRange(int64_t lo, int64_t n);
  // Flat element ranges [lo, lo + n) (within one bucket) between the device and the host
  // ParamStore (gradients: FlatGradPtr; parameters: the flat model copy, the master in fp32).
  Status GradsToHost(int64_t lo, int64_t n);
  Status GradsFromHost(int64_t lo, int64_t n);
  Status ParamsToHost(int64_t lo, int64_t n);
  Status ParamsFromHost(int64_t lo, int64_t n);
  // Stage 2: shard[pos(flat_lo) .. + n) += `values` (device memory, model dtype), owned
  // elements of one segment; and the same range copied from the host ParamStore's shard.
  Status AccumulateIntoShard(int64_t flat_lo, const void* values, int64_t n);
  // The same at shard position `pos` (stage 3: a unit's chunk).
  Status AccumulateAtShardPos(int64_t pos, const void* values, int64_t n);
  Status ShardFromHost(int64_t flat_lo, int64_t n);

  // The sum of squared gradients over ranges (offset, count), fixed once (a data-parallel
  // rank's share of the norm): flat elements of the gradients, or with `in_shard`, shard
  // positions of the gradient shard. AddNormShare returns its id.
  StatusOr<int> AddNormShare(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                             bool in_shard = false);
  StatusOr<SquaredNormResult> GradSquaredSum(int share);

  // One optimizer update of the owned elements with learning rate `lr`, every gradient
  // multiplied by `grad_scale` first; advances the Optimizer's step count.
  Status Step(float lr, float grad_scale);

 private:
  DeviceStates(DeviceMemory* memory, ParamStore* params, Optimizer* optimizer)
      : memory_(memory), params_store_(params), optimizer_(optimizer) {}
  // Persistent units between the device's arena and the host's flat model copy.
  Status PersistentUnits(bool to_device);
  Status Build();

  DeviceMemory* memory_;
  ParamStore* params_store_;
  Optimizer* optimizer_;
  std::unique_ptr<OptimizerKernels> kernels_;
  DeviceBuffer params_, grads_, shard_, pshard_, master_, m_, v_;
  std::vector<DeviceParamBlock> param_blocks_;  // stage 3
  int64_t param_arena_elements_ = 0;
  int64_t delta_ = 0;  // flat element = shard position + delta_ (stages 0-2: one segment)
  int optimizer_set_ = -1;
  std::vector<bool> share_in_shard_;  // per norm share
  size_t tsize_ = 4;
};

}  // namespace ds::zero
