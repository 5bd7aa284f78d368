// Host launchers for layernorm and rmsnorm over the last dimension (norm.cu). x is `rows`
// rows of `cols` contiguous elements; gamma, beta are [cols]; mean and rstd are the op's
// fp32 saved buffers [rows] (see kernels/cpu/layernorm.cc, rmsnorm.cc for the math).
// float and __nv_bfloat16 storage, fp32 compute. Asynchronous on `stream`; returns the
// launch error. Backward ACCUMULATES into dx, dgamma, dbeta; a null one is skipped.
// Deterministic: every sum has a fixed order (no atomics).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

#define DS_NORM_DECLARE(T)                                                                         \
  cudaError_t LaunchLayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean, \
                                     float* rstd, int64_t rows, int64_t cols, float eps,           \
                                     cudaStream_t stream);                                         \
  cudaError_t LaunchLayerNormBackward(const T* x, const T* gamma, const T* dy, const float* mean,  \
                                      const float* rstd, T* dx, T* dgamma, T* dbeta, int64_t rows, \
                                      int64_t cols, cudaStream_t stream);                          \
  cudaError_t LaunchRmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int64_t rows,    \
                                   int64_t cols, float eps, cudaStream_t stream);                  \
  cudaError_t LaunchRmsNormBackward(const T* x, const T* gamma, const T* dy, const float* rstd,    \
                                    T* dx, T* dgamma, int64_t rows, int64_t cols,                  \
                                    cudaStream_t stream);

DS_NORM_DECLARE(float)
DS_NORM_DECLARE(__nv_bfloat16)
DS_NORM_DECLARE(__half)

#undef DS_NORM_DECLARE

}  // namespace ds::kernels
