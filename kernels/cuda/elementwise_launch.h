// Host launchers for the elementwise kernels (elementwise.cu): add, mul, silu, fused
// SwiGLU, dropout, and the accumulate/scale helpers. Plain CUDA headers only, so nvcc and
// the registry glue (g++) both include it.
//
// Every launcher has a float and a __nv_bfloat16 overload (the storage type; compute is
// fp32, rounded once on store), is asynchronous on `stream`, and returns the launch error
// without synchronizing. Pointers are device memory of `n` elements; n == 0 launches
// nothing. Backward launchers ACCUMULATE (+=) into their gradients (kernels/op.h); a null
// gradient pointer means "not wanted" and is skipped. Outputs may alias inputs only in
// forward launchers.
//
//   DS_CUDA_RETURN_IF_ERROR(LaunchAddForward(a, b, y, n, cuda::CurrentStream()));
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

#define DS_ELEMENTWISE_DECLARE(T)                                                                 \
  /* y = a + b */                                                                                 \
  cudaError_t LaunchAddForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);     \
  /* dst += src (add's backward, residual gradients) */                                           \
  cudaError_t LaunchAccumulate(const T* src, T* dst, int64_t n, cudaStream_t stream);             \
  /* y = a * b */                                                                                 \
  cudaError_t LaunchMulForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);     \
  /* da += dy * b, db += dy * a (either may be null) */                                           \
  cudaError_t LaunchMulBackward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,     \
                                cudaStream_t stream);                                             \
  /* y = x * sigmoid(x) */                                                                        \
  cudaError_t LaunchSiluForward(const T* x, T* y, int64_t n, cudaStream_t stream);                \
  /* dx += dy * s (1 + x (1 - s)), s = sigmoid(x) */                                              \
  cudaError_t LaunchSiluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t stream); \
  /* Fused SwiGLU: y = silu(a) * b */                                                             \
  cudaError_t LaunchSwiGluForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);  \
  /* da += dy * b * silu'(a), db += dy * silu(a) (either may be null) */                          \
  cudaError_t LaunchSwiGluBackward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,  \
                                   cudaStream_t stream);                                          \
  /* Dropout with the CPU op's counter-based mask: element i is kept when                         \
     (SplitMix64(seed, i) >> 40) >= threshold; kept values are multiplied by scale. dst =         \
     (accumulate ? dst + v : v). threshold 0 and scale 1 is the identity. */                      \
  cudaError_t LaunchDropout(const T* src, T* dst, int64_t n, uint64_t seed, uint64_t threshold,   \
                            float scale, bool accumulate, cudaStream_t stream);

DS_ELEMENTWISE_DECLARE(float)
DS_ELEMENTWISE_DECLARE(__nv_bfloat16)
DS_ELEMENTWISE_DECLARE(__half)

#undef DS_ELEMENTWISE_DECLARE

}  // namespace ds::kernels
