// Host launchers for the GELU kernels (gelu.cu). Plain CUDA, no ds headers, so both
// nvcc and the registry glue (g++) include it. Launchers are asynchronous on `stream`
// and return the launch error (cudaGetLastError) without synchronizing; pointers are
// device memory of `n` elements, fp32 or bf16 storage (fp32 compute, one rounding on
// store). n == 0 launches nothing and returns cudaSuccess.
//
//   DS_CUDA_RETURN_IF_ERROR(LaunchGeluForward(x, y, n, stream));
//   DS_CUDA_RETURN_IF_ERROR(LaunchGeluBackward(x, dy, dx, n, stream));  // dx += ...
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels {

// y = gelu(x), tanh approximation (GPT-2). x and y may alias.
cudaError_t LaunchGeluForward(const float* x, float* y, int64_t n, cudaStream_t stream);

// dx += dy * gelu'(x): ACCUMULATES into dx (see kernels/op.h). dx must not alias x or dy.
cudaError_t LaunchGeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream);

// The same for bf16 storage.
cudaError_t LaunchGeluForward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n,
                              cudaStream_t stream);
cudaError_t LaunchGeluBackward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx,
                               int64_t n, cudaStream_t stream);

// And for fp16 storage.
cudaError_t LaunchGeluForward(const __half* x, __half* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchGeluBackward(const __half* x, const __half* dy, __half* dx, int64_t n,
                               cudaStream_t stream);

}  // namespace ds::kernels
