// StateView: one place where a rank's model states live (the host ParamStore, or the device's
// DeviceStates), as the ZeRO collectives and the step's state instructions see it: addresses
// of flat elements, shard positions, and the memory operations on them (host: memcpy; device:
// DeviceMemory). Every ZeRO collective is written once over this interface
// (zero/zero_collectives.cc), not once per memory.
//
//   std::unique_ptr<StateView> host = MakeHostView(&params, &optimizer);
//   DS_RETURN_IF_ERROR(host->Copy(host->Params(lo), staged, n * DTypeSize(host->dtype())));
//
// Not thread-safe; borrowed stores must outlive the view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/dtype.h"
#include "zero/param_store.h"

namespace ds::proto {
class Instruction;
class Plan;
class ParamRange;
}  // namespace ds::proto

namespace ds::zero {
class DeviceStates;
class Optimizer;
class OptimizerSwapper;
}  // namespace ds::zero

namespace ds::zero {

class StateView {
 public:
  virtual ~StateView() = default;

  virtual DType dtype() const = 0;  // the model dtype of parameters and gradients
  // Flat element `i` of the parameters compute reads (stage 3: where its unit is gathered).
  virtual char* Params(int64_t i) = 0;
  virtual char* ParamShard(int64_t pos) = 0;  // stage 3: position `pos` of the parameter shard
  virtual char* Grads(int64_t i) = 0;         // flat gradient element `i`
  // What the stage 1-2 shard all-gather moves: the 16-bit copy, or the fp32 master in fp32.
  virtual char* Updated(int64_t i) = 0;
  virtual DType updated_dtype() const = 0;
  // The ZeRO layout (ParamStore::Shard's): owned segments and flat -> shard positions.
  virtual const ParamStore& layout() const = 0;

  // grad_shard[pos, pos + n) += values (`vt` elements).
  virtual Status AddToGradShard(int64_t pos, const void* values, DType vt, int64_t n) = 0;
  // Gradients [i, i + n) are reduced and no longer needed here: zeroed for the next writer.
  virtual Status ReleaseGrads(int64_t i, int64_t n) = 0;
  virtual void ParamsChanged() {}

  virtual Status Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual Status Zero(void* dst, size_t bytes) = 0;
  // dst[k] = src[k] converted, k < n (a device copies only between equal dtypes).
  virtual Status Convert(const void* src, DType st, void* dst, DType dt, int64_t n) = 0;
  // The compute stream collectives on these buffers must follow (null: host memory).
  virtual void* stream() const { return nullptr; }

  // The step's state instructions.
  virtual Status ZeroGrads() = 0;
  // Sum of squares of the gradients over `ranges` (flat elements, or shard positions).
  virtual StatusOr<double> SquaredSum(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                      bool in_shard) = 0;
  // OPTIMIZER_STEP `in`: the whole owned shard, or (in.swap) one sub-group in its swap buffer.
  virtual Status Step(const proto::Instruction& in, float lr, float grad_scale) = 0;
  virtual Status ReleaseParams(int64_t i, int64_t n) = 0;  // a gathered stage-3 unit
  // offload_param nvme: shard positions [pos, pos + n) were copied out of a swapped-in chunk
  // and are not needed in memory until the next swap-in.
  virtual void DropParamShard(int64_t pos, int64_t n) {}
};

// The host ParamStore (sharded already) and the host optimizer over it.
// With `swapper` (offload_optimizer nvme), sub-group steps run on its swap buffers.
std::unique_ptr<StateView> MakeHostView(ParamStore* params, Optimizer* optimizer,
                                        OptimizerSwapper* swapper = nullptr);

// The device's model states. The norm shares of the plan's GRAD_NORM_REDUCE for `rank` are
// registered at once (DeviceStates::AddNormShare), so the step allocates nothing.
StatusOr<std::unique_ptr<StateView>> MakeDeviceView(DeviceStates* device, ParamStore* params,
                                                    const proto::Plan& plan, int rank);

// dst[i] = src[i] converted, for n elements of float types (host memory).
void ConvertHost(const void* src, DType st, void* dst, DType dt, int64_t n);
// shard[pos + i] += values[i] for i < n (host memory).
void AccumulateHost(void* shard, DType t, int64_t pos, const void* values, DType vt, int64_t n);

}  // namespace ds::zero
