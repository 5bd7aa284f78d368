// Optimizer kernels (optimizer_launch.h): multi-tensor AdamW, casts, global grad norm.
//
// AdamW: one block per segment (<= 64K elements of one parameter), so a single launch
// walks every parameter and each block knows its weight-decay flag without searching.
// Per element: 3 fp32 reads + 3 fp32 writes (p, m, v), one G read, one optional G write:
// 28 bytes per parameter with bf16 gradients and model copy, all streaming and coalesced.
// The arithmetic mirrors zero/optimizer.cc (same operation order) so CPU and GPU
// agree to fp32 rounding.
//
// Grad norm: kernel 1 writes one double partial per segment (block reduction in a fixed
// order); kernel 2, one block, sums the partials in a fixed order into the result scalar
// and sets the overflow flag. inf or nan anywhere makes the sum inf or nan, which is what
// the flag tests, so no separate per-element flag is kept.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/optimizer_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr int kOptThreads = 256;
constexpr int kReduceThreads = 1024;

struct AdamWScalars {
  float b1, b2, eps, step_size, inv_sqrt_bc2, decay_factor, l2, grad_scale;
};

template <typename G>
__global__ void AdamWKernel(const AdamWSegment* __restrict__ segments, float* __restrict__ master,
                            float* __restrict__ m_all, float* __restrict__ v_all,
                            const G* __restrict__ grad, G* __restrict__ model, AdamWScalars s) {
  const AdamWSegment seg = segments[blockIdx.x];
  const float decay = seg.decay ? s.decay_factor : 1.f;
  const float l2 = seg.decay ? s.l2 : 0.f;
  for (int64_t k = threadIdx.x; k < seg.numel; k += blockDim.x) {
    const int64_t i = seg.offset + k;
    const float p = master[i];
    const float g = ToF32(grad[i]) * s.grad_scale + l2 * p;
    const float mi = s.b1 * m_all[i] + (1.0f - s.b1) * g;
    const float vi = s.b2 * v_all[i] + (1.0f - s.b2) * g * g;
    m_all[i] = mi;
    v_all[i] = vi;
    const float pi = p * decay - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
    master[i] = pi;
    if (model) model[i] = FromF32<G>(pi);
  }
}

// torch.optim.SGD (dampening 0, not Nesterov): g = G * scale + wd p; buf = mu buf + g (buf
// starts at zero, so the first step stores g as torch does); p -= lr * (momentum ? buf : g).
template <typename G>
__global__ void SgdKernel(const AdamWSegment* __restrict__ segments, float* __restrict__ master,
                          float* __restrict__ buf_all, const G* __restrict__ grad,
                          G* __restrict__ model, float lr, float wd, float momentum,
                          float grad_scale) {
  const AdamWSegment seg = segments[blockIdx.x];
  const float decay = seg.decay ? wd : 0.f;
  for (int64_t k = threadIdx.x; k < seg.numel; k += blockDim.x) {
    const int64_t i = seg.offset + k;
    float g = ToF32(grad[i]) * grad_scale + decay * master[i];
    if (buf_all) {
      g = momentum * buf_all[i] + g;
      buf_all[i] = g;
    }
    const float p = master[i] - lr * g;
    master[i] = p;
    if (model) model[i] = FromF32<G>(p);
  }
}

template <typename G>
__global__ void SquaredSumKernel(const AdamWSegment* __restrict__ segments,
                                 const G* __restrict__ grad, float inv_scale,
                                 double* __restrict__ partials) {
  __shared__ double shared[32];
  const AdamWSegment seg = segments[blockIdx.x];
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < seg.numel; k += blockDim.x) {
    const double g = static_cast<double>(ToF32(grad[seg.offset + k]) * inv_scale);
    sum += g * g;
  }
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void FinishNormKernel(const double* __restrict__ partials, int64_t n,
                                 GradNormResult* result) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) {
    result->sum_sq = sum;
    result->overflow = isfinite(sum) ? 0 : 1;
  }
}

template <typename S, typename D>
__global__ void CastKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = FromF32<D>(ToF32(src[i]));
}

bool BadCount(int64_t num_segments) { return num_segments < 0 || num_segments > 0x7fffffffLL; }

template <typename G>
cudaError_t AdamW(const AdamWSegment* segments, int64_t num_segments, float* master, float* m,
                  float* v, const G* grad, G* model, const AdamWStepParams& p,
                  cudaStream_t stream) {
  if (BadCount(num_segments) || p.step < 1) return cudaErrorInvalidValue;
  if (num_segments == 0) return cudaSuccess;
  // The host-side scalars exactly as Optimizer::Step / StepAdam compute them.
  const float bc1 = p.bias_correction
                        ? 1.0f - static_cast<float>(pow(p.beta1, static_cast<double>(p.step)))
                        : 1.0f;
  const float bc2 = p.bias_correction
                        ? 1.0f - static_cast<float>(pow(p.beta2, static_cast<double>(p.step)))
                        : 1.0f;
  AdamWScalars s;
  s.b1 = p.beta1;
  s.b2 = p.beta2;
  s.eps = p.eps;
  s.step_size = p.lr / bc1;
  s.inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
  s.decay_factor = p.decoupled ? 1.0f - p.lr * p.weight_decay : 1.0f;
  s.l2 = p.decoupled ? 0.0f : p.weight_decay;
  s.grad_scale = p.grad_scale;
  AdamWKernel<G><<<static_cast<unsigned>(num_segments), kOptThreads, 0, stream>>>(
      segments, master, m, v, grad, model, s);
  return cudaGetLastError();
}

template <typename G>
cudaError_t Sgd(const AdamWSegment* segments, int64_t num_segments, float* master, float* buf,
                const G* grad, G* model, const SgdStepParams& p, cudaStream_t stream) {
  if (BadCount(num_segments)) return cudaErrorInvalidValue;
  if (num_segments == 0) return cudaSuccess;
  SgdKernel<G><<<static_cast<unsigned>(num_segments), kOptThreads, 0, stream>>>(
      segments, master, buf, grad, model, p.lr, p.weight_decay, p.momentum, p.grad_scale);
  return cudaGetLastError();
}

template <typename G>
cudaError_t GradNorm(const AdamWSegment* segments, int64_t num_segments, const G* grad,
                     float inv_scale, double* workspace, GradNormResult* result,
                     cudaStream_t stream) {
  if (BadCount(num_segments)) return cudaErrorInvalidValue;
  if (num_segments > 0) {
    SquaredSumKernel<G><<<static_cast<unsigned>(num_segments), kOptThreads, 0, stream>>>(
        segments, grad, inv_scale, workspace);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  FinishNormKernel<<<1, kReduceThreads, 0, stream>>>(workspace, num_segments, result);
  return cudaGetLastError();
}

template <typename S, typename D>
cudaError_t Cast(const S* src, D* dst, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  CastKernel<S, D><<<BlocksFor(n), kThreads, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace

#define DS_ADAMW_DEFINE(G)                                                                       \
  cudaError_t LaunchAdamWStep(const AdamWSegment* segments, int64_t num_segments, float* master, \
                              float* m, float* v, const G* grad, G* model,                       \
                              const AdamWStepParams& params, cudaStream_t stream) {              \
    return AdamW(segments, num_segments, master, m, v, grad, model, params, stream);             \
  }                                                                                              \
  cudaError_t LaunchGradSquaredNorm(const AdamWSegment* segments, int64_t num_segments,          \
                                    const G* grad, float inv_scale, double* workspace,           \
                                    GradNormResult* result, cudaStream_t stream) {               \
    return GradNorm(segments, num_segments, grad, inv_scale, workspace, result, stream);         \
  }                                                                                              \
  cudaError_t LaunchSgdStep(const AdamWSegment* segments, int64_t num_segments, float* master,   \
                            float* momentum_buf, const G* grad, G* model,                        \
                            const SgdStepParams& params, cudaStream_t stream) {                  \
    return Sgd(segments, num_segments, master, momentum_buf, grad, model, params, stream);       \
  }

DS_ADAMW_DEFINE(float)
DS_ADAMW_DEFINE(__nv_bfloat16)
DS_ADAMW_DEFINE(__half)

#undef DS_ADAMW_DEFINE

cudaError_t LaunchCast(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
  return Cast(src, dst, n, stream);
}
cudaError_t LaunchCast(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream) {
  return Cast(src, dst, n, stream);
}
cudaError_t LaunchCast(const float* src, __half* dst, int64_t n, cudaStream_t stream) {
  return Cast(src, dst, n, stream);
}
cudaError_t LaunchCast(const __half* src, float* dst, int64_t n, cudaStream_t stream) {
  return Cast(src, dst, n, stream);
}

}  // namespace ds::kernels
