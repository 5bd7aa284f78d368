// GELU, tanh approximation (as GPT-2 and llm.c), fp32 compute; fp32 or bf16 storage.
//
//   u     = s * (x + c * x^3),        s = sqrt(2 / pi), c = 0.044715
//   y     = 0.5 * x * (1 + tanh(u))
//   dy/dx = 0.5 * (1 + tanh(u)) + 0.5 * x * (1 - tanh(u)^2) * s * (1 + 3 * c * x^2)
//
// Layout: flat arrays of n elements; any shape works. Each thread handles elements
// i, i + stride, ... (grid-stride loop), so the grid is capped and n may exceed 2^31.
// Memory bound: one read and one write per element forward, three reads and one write
// backward; tanhf is cheap next to that. Backward accumulates (dx +=), see kernels/op.h.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/gelu_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

template <typename T>
__global__ void GeluForwardKernel(const T* __restrict__ x, T* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = ToF32(x[i]);
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    y[i] = FromF32<T>(0.5f * v * (1.0f + tanhf(u)));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                   T* __restrict__ dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = ToF32(x[i]);
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float t = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    AddTo(dx, i, ToF32(dy[i]) * grad);
  }
}

template <typename T>
cudaError_t Forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  GeluForwardKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  GeluBackwardKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGeluForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return Forward(x, y, n, stream);
}
cudaError_t LaunchGeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream) {
  return Backward(x, dy, dx, n, stream);
}
cudaError_t LaunchGeluForward(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t n,
                              cudaStream_t stream) {
  return Forward(x, y, n, stream);
}
cudaError_t LaunchGeluBackward(const __nv_bfloat16* x, const __nv_bfloat16* dy, __nv_bfloat16* dx,
                               int64_t n, cudaStream_t stream) {
  return Backward(x, dy, dx, n, stream);
}
cudaError_t LaunchGeluForward(const __half* x, __half* y, int64_t n, cudaStream_t stream) {
  return Forward(x, y, n, stream);
}
cudaError_t LaunchGeluBackward(const __half* x, const __half* dy, __half* dx, int64_t n,
                               cudaStream_t stream) {
  return Backward(x, dy, dx, n, stream);
}

}  // namespace ds::kernels
