// Host launchers for the optimizer's device work (optimizer.cu): a multi-tensor AdamW
// step over the flat fp32 master weights, fp32 <-> bf16/fp16 casts, and the global
// squared gradient norm with an inf/nan flag computed into one device scalar.
//
// Parameters are described by a device array of AdamWSegment, each a contiguous range of
// at most kOptimizerChunk flat elements of one parameter (SplitOptimizerSegments builds it
// on the host; upload it once and reuse it every step). One launch then covers every
// parameter: block b updates segment b. Launchers are asynchronous on `stream` and return
// the launch error; nothing synchronizes or copies to the host.
//
//   std::vector<AdamWSegment> segs = SplitOptimizerSegments(params);  // once
//   ... cudaMemcpy segs to d_segs ...
//   LaunchGradSquaredNorm(d_segs, segs.size(), grad, inv_loss_scale, workspace, d_norm, s);
//   LaunchAdamWStep(d_segs, segs.size(), master, m, v, grad, model, step_params, s);
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ds::kernels {

// Flat elements per segment (one thread block's work in one launch).
constexpr int64_t kOptimizerChunk = 1 << 16;

struct AdamWSegment {
  int64_t offset = 0;  // first flat element (into master, m, v, grad and model)
  int32_t numel = 0;   // 1 .. kOptimizerChunk
  int32_t decay = 0;   // 1: weight decay applies (rank >= 2 parameters), 0: it does not
};

// One parameter of the flat layout, for SplitOptimizerSegments.
struct OptimizerParamRange {
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;
};

// Cuts each parameter into segments of at most kOptimizerChunk elements (empty ones are
// dropped), in order.
inline std::vector<AdamWSegment> SplitOptimizerSegments(
    const std::vector<OptimizerParamRange>& params) {
  std::vector<AdamWSegment> out;
  for (const OptimizerParamRange& p : params) {
    for (int64_t done = 0; done < p.numel; done += kOptimizerChunk) {
      const int64_t left = p.numel - done;
      AdamWSegment s;
      s.offset = p.offset + done;
      s.numel = static_cast<int32_t>(left < kOptimizerChunk ? left : kOptimizerChunk);
      s.decay = p.decay ? 1 : 0;
      out.push_back(s);
    }
  }
  return out;
}

// The step's scalars, as zero/optimizer.cc uses them (torch.optim semantics).
struct AdamWStepParams {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;     // applied to segments with decay == 1
  float grad_scale = 1.f;       // every gradient is multiplied by this first (unscale x clip)
  int64_t step = 1;             // 1-based step number after incrementing, for bias correction
  bool decoupled = true;        // true: AdamW (p *= 1 - lr wd); false: Adam (g += wd p)
  bool bias_correction = true;  // false: bc1 = bc2 = 1 (DeepSpeed's bias_correction false)
};

// SGD's scalars (torch.optim.SGD without dampening or Nesterov).
struct SgdStepParams {
  float lr = 1e-3f;
  float momentum = 0.f;      // with a null momentum buffer: plain SGD
  float weight_decay = 0.f;  // added to the gradient (L2), segments with decay == 1
  float grad_scale = 1.f;
};

// The global gradient norm's device scalar (LaunchGradSquaredNorm).
struct GradNormResult {
  double sum_sq;
  int32_t overflow;
};

// One AdamW (or Adam) update of every segment: reads grad (G), updates master, m, v (fp32)
// and, when `model` is non-null, writes the rounded 16-bit (or fp32) model copy in the same
// pass. Matches ds::Optimizer::StepAdam element for element up to fp32 rounding.
#define DS_ADAMW_DECLARE(G)                                                                      \
  cudaError_t LaunchAdamWStep(const AdamWSegment* segments, int64_t num_segments, float* master, \
                              float* m, float* v, const G* grad, G* model,                       \
                              const AdamWStepParams& params, cudaStream_t stream);               \
  /* Global norm: result->sum_sq = sum over segments of (g * inv_scale)^2 (double), and          \
     result->overflow = 1 when that sum is inf or nan (some gradient was). `workspace` is        \
     num_segments doubles of device memory; the sum has a fixed order (deterministic). */        \
  cudaError_t LaunchGradSquaredNorm(const AdamWSegment* segments, int64_t num_segments,          \
                                    const G* grad, float inv_scale, double* workspace,           \
                                    GradNormResult* result, cudaStream_t stream);                \
  /* One SGD update of every segment; momentum_buf may be null (no momentum). */                 \
  cudaError_t LaunchSgdStep(const AdamWSegment* segments, int64_t num_segments, float* master,   \
                            float* momentum_buf, const G* grad, G* model,                        \
                            const SgdStepParams& params, cudaStream_t stream);

DS_ADAMW_DECLARE(float)
DS_ADAMW_DECLARE(__nv_bfloat16)
DS_ADAMW_DECLARE(__half)

#undef DS_ADAMW_DECLARE

// dst[i] = src[i] converted (round to nearest even; fp16 overflow gives inf).
cudaError_t LaunchCast(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream);
cudaError_t LaunchCast(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream);
cudaError_t LaunchCast(const float* src, __half* dst, int64_t n, cudaStream_t stream);
cudaError_t LaunchCast(const __half* src, float* dst, int64_t n, cudaStream_t stream);

}  // namespace ds::kernels
