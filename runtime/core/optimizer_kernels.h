// OptimizerKernels: the optimizer's work on model states that live in a DeviceMemory
// (zero/device_states.h): one fused Adam/AdamW (or SGD) pass over every owned
// parameter that also writes the 16-bit model copy, the squared gradient norm with a non-finite
// flag, and ZeRO-2's accumulation of reduced gradients into the gradient shard. Each device has one
// implementation, registered like the op kernels:
//
//   kCpu    optimizer_kernels.cc, for HostMemory (the device path run on the CPU, which
//           tests compare with the host Optimizer element for element); built in
//   kCuda   kernels/cuda/cuda_optimizer_kernels.cc (kernels/cuda/optimizer.cu, one launch
//           for all parameters), registered when the CUDA plugin loads
//
// Work is described by segments made once: contiguous runs of elements of one parameter, at
// offsets into the buffers each call passes (the rank's shard space for the optimizer; flat
// elements for a norm share). Calls are ordered with the memory's other work (CUDA: its
// stream); SquaredNorm returns once the scalar is on the host.
//
//   DS_ASSIGN_OR_RETURN(auto k, OptimizerKernels::Create(memory));
//   DS_ASSIGN_OR_RETURN(int set, k->AddSegments(segments));
//   DS_RETURN_IF_ERROR(k->AdamStep(set, {master, m, v, grad, model, dtype}, step));
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/device_memory.h"
#include "runtime/core/tensor.h"

namespace ds {

struct OptimizerSegment {
  int64_t offset = 0;  // first element, into every buffer of a call
  int64_t numel = 0;
  bool decay = false;  // weight decay applies (parameters of rank >= 2)
};

// torch.optim semantics, as zero/optimizer.cc.
struct AdamStepParams {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  float grad_scale = 1.f;       // every gradient is multiplied by this first (unscale x clip)
  int64_t step = 1;             // 1-based, after incrementing: bias correction
  bool decoupled = true;        // AdamW (p *= 1 - lr wd); false: Adam (g += wd p)
  bool bias_correction = true;  // false: bc1 = bc2 = 1 (the raw moments)
};

struct SgdStepParams {
  float lr = 1e-3f;
  float momentum = 0.f;
  float weight_decay = 0.f;
  float grad_scale = 1.f;
};

// Device pointers of one update. `grad` and `model` are in `dtype` (f32, bf16 or f16);
// `model` may be null (fp32 training: the master is the model).
struct AdamBuffers {
  float* master = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  void* model = nullptr;
  DType dtype = DType::kF32;
};

struct SquaredNormResult {
  double sum_sq = 0;   // sum of (g * inv_scale)^2 over the segments
  bool finite = true;  // false when some gradient is inf or nan
};

class OptimizerKernels {
 public:
  virtual ~OptimizerKernels() = default;
  // The kernels registered for `memory`'s device, working in it (borrowed).
  static StatusOr<std::unique_ptr<OptimizerKernels>> Create(DeviceMemory* memory);

  // Registers a segment set (kept for the object's life: CUDA uploads it once); returns its id.
  virtual StatusOr<int> AddSegments(const std::vector<OptimizerSegment>& segments) = 0;
  virtual Status AdamStep(int set, const AdamBuffers& b, const AdamStepParams& params) = 0;
  // torch.optim.SGD (no dampening, not Nesterov): b.m is the momentum buffer (null without
  // momentum); b.v is unused; weight decay is added to the gradient.
  virtual Status SgdStep(int set, const AdamBuffers& b, const SgdStepParams& params) = 0;
  virtual StatusOr<SquaredNormResult> SquaredNorm(int set, const void* grad, DType dtype,
                                                  float inv_scale) = 0;
  // dst[i] += src[i] for i < n, in `dtype` (computed in fp32, rounded once).
  virtual Status Accumulate(void* dst, const void* src, int64_t n, DType dtype) = 0;

  using Factory = StatusOr<std::unique_ptr<OptimizerKernels>> (*)(DeviceMemory* memory);
  // For a backend plugin's devices (kCpu is built in). Returns true, so it can initialize a
  // static. A second registration for a device aborts.
  static bool Register(Device device, Factory factory);
};

}  // namespace ds
