// Elementwise kernels: add, mul, silu, fused SwiGLU, dropout (see elementwise_launch.h).
//
// Each op is a functor applied by one of three grid-stride kernels (map two inputs to one
// output, accumulate into up to two gradients, or the dropout mask). Loads convert the
// storage type to fp32, math is fp32, and each store rounds once, so a bf16 result is the
// bf16 rounding of the fp32 result the CPU reference computes on the same inputs.
// All of these are memory bound: no shared memory, no vector loads beyond what the
// compiler does; the grid is capped at kMaxBlocks and threads loop.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/elementwise_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

__device__ __forceinline__ float Sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// --- forward functors: y = f(a, b) ----------------------------------------------------
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct SiluOp {  // b unused
  __device__ float operator()(float a, float) const { return a * Sigmoid(a); }
};
struct SwiGluOp {
  __device__ float operator()(float a, float b) const { return a * Sigmoid(a) * b; }
};

// --- backward functors: (da, db) contributions from (a, b, dy) ------------------------
struct AccumulateGrad {  // a is the incoming gradient itself
  __device__ void operator()(float, float, float dy, float* da, float* db) const {
    *da = dy;
    *db = 0.f;
  }
};
struct MulGrad {
  __device__ void operator()(float a, float b, float dy, float* da, float* db) const {
    *da = dy * b;
    *db = dy * a;
  }
};
struct SiluGrad {
  __device__ void operator()(float a, float, float dy, float* da, float* db) const {
    const float s = Sigmoid(a);
    *da = dy * s * (1.f + a * (1.f - s));
    *db = 0.f;
  }
};
struct SwiGluGrad {
  __device__ void operator()(float a, float b, float dy, float* da, float* db) const {
    const float s = Sigmoid(a);
    *da = dy * b * s * (1.f + a * (1.f - s));
    *db = dy * a * s;
  }
};

template <typename T, typename Op>
__global__ void MapKernel(const T* __restrict__ a, const T* __restrict__ b, T* y, int64_t n,
                          Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = FromF32<T>(op(ToF32(a[i]), b ? ToF32(b[i]) : 0.f));
  }
}

template <typename T, typename Op>
__global__ void GradKernel(const T* __restrict__ a, const T* __restrict__ b,
                           const T* __restrict__ dy, T* __restrict__ da, T* __restrict__ db,
                           int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float ga, gb;
    op(a ? ToF32(a[i]) : 0.f, b ? ToF32(b[i]) : 0.f, ToF32(dy[i]), &ga, &gb);
    if (da) AddTo(da, i, ga);
    if (db) AddTo(db, i, gb);
  }
}

template <typename T>
__global__ void DropoutKernel(const T* __restrict__ src, T* dst, int64_t n, uint64_t seed,
                              uint64_t threshold, float scale, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = ToF32(src[i]);
    if (threshold != 0 || scale != 1.f)
      v = (SplitMix64(seed, static_cast<uint64_t>(i)) >> 40) >= threshold ? v * scale : 0.f;
    dst[i] = FromF32<T>(accumulate ? ToF32(dst[i]) + v : v);
  }
}

template <typename T, typename Op>
cudaError_t Map(const T* a, const T* b, T* y, int64_t n, Op op, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  MapKernel<T, Op><<<BlocksFor(n), kThreads, 0, stream>>>(a, b, y, n, op);
  return cudaGetLastError();
}

template <typename T, typename Op>
cudaError_t Grad(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n, Op op,
                 cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0 || (da == nullptr && db == nullptr)) return cudaSuccess;
  GradKernel<T, Op><<<BlocksFor(n), kThreads, 0, stream>>>(a, b, dy, da, db, n, op);
  return cudaGetLastError();
}

}  // namespace

#define DS_ELEMENTWISE_DEFINE(T)                                                                   \
  cudaError_t LaunchAddForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {     \
    return Map(a, b, y, n, AddOp{}, stream);                                                       \
  }                                                                                                \
  cudaError_t LaunchAccumulate(const T* src, T* dst, int64_t n, cudaStream_t stream) {             \
    return Grad<T>(nullptr, nullptr, src, dst, nullptr, n, AccumulateGrad{}, stream);              \
  }                                                                                                \
  cudaError_t LaunchMulForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {     \
    return Map(a, b, y, n, MulOp{}, stream);                                                       \
  }                                                                                                \
  cudaError_t LaunchMulBackward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,      \
                                cudaStream_t stream) {                                             \
    return Grad(a, b, dy, da, db, n, MulGrad{}, stream);                                           \
  }                                                                                                \
  cudaError_t LaunchSiluForward(const T* x, T* y, int64_t n, cudaStream_t stream) {                \
    return Map<T>(x, nullptr, y, n, SiluOp{}, stream);                                             \
  }                                                                                                \
  cudaError_t LaunchSiluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t stream) { \
    return Grad<T>(x, nullptr, dy, dx, nullptr, n, SiluGrad{}, stream);                            \
  }                                                                                                \
  cudaError_t LaunchSwiGluForward(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {  \
    return Map(a, b, y, n, SwiGluOp{}, stream);                                                    \
  }                                                                                                \
  cudaError_t LaunchSwiGluBackward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,   \
                                   cudaStream_t stream) {                                          \
    return Grad(a, b, dy, da, db, n, SwiGluGrad{}, stream);                                        \
  }                                                                                                \
  cudaError_t LaunchDropout(const T* src, T* dst, int64_t n, uint64_t seed, uint64_t threshold,    \
                            float scale, bool accumulate, cudaStream_t stream) {                   \
    if (n < 0) return cudaErrorInvalidValue;                                                       \
    if (n == 0) return cudaSuccess;                                                                \
    DropoutKernel<T>                                                                               \
        <<<BlocksFor(n), kThreads, 0, stream>>>(src, dst, n, seed, threshold, scale, accumulate);  \
    return cudaGetLastError();                                                                     \
  }

DS_ELEMENTWISE_DEFINE(float)
DS_ELEMENTWISE_DEFINE(__nv_bfloat16)
DS_ELEMENTWISE_DEFINE(__half)

#undef DS_ELEMENTWISE_DEFINE

}  // namespace ds::kernels
