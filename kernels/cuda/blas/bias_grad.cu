// Bias gradient of y = x W^T + b:  db[j] += sum_i dy[i, j], dy row-major [rows, cols].
//
// One block owns 32 consecutive columns: its 32 x 8 threads read 32 columns of 8 rows at
// a time (coalesced 32-wide row segments), each thread summing its column over rows
// r, r + 8, ...; the 8 partial sums of a column are then added in shared memory in a
// fixed order, so the result does not depend on scheduling. fp32 accumulation for every
// storage type; db is read, added to and rounded once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/blas/bias_grad_launch.h"

namespace ds::kernels::blas {
namespace {

constexpr int kCols = 32;
constexpr int kRowThreads = 8;

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half(v); }

template <typename T>
__global__ void BiasGradKernel(const T* __restrict__ dy, int64_t rows, int64_t cols,
                               T* __restrict__ db) {
  __shared__ float partial[kRowThreads][kCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  float acc = 0.f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRowThreads) acc += Load(dy + r * cols + col);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float sum = 0.f;
    for (int i = 0; i < kRowThreads; ++i) sum += partial[i][threadIdx.x];
    Store(db + col, Load(db + col) + sum);
  }
}

template <typename T>
void Launch(const void* dy, int64_t rows, int64_t cols, void* db, cudaStream_t stream) {
  const dim3 block(kCols, kRowThreads);
  const dim3 grid(static_cast<unsigned>((cols + kCols - 1) / kCols));
  BiasGradKernel<T>
      <<<grid, block, 0, stream>>>(static_cast<const T*>(dy), rows, cols, static_cast<T*>(db));
}

}  // namespace

cudaError_t LaunchBiasGrad(const void* dy, int64_t rows, int64_t cols, BiasGradType type, void* db,
                           cudaStream_t stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if ((cols + kCols - 1) / kCols > 0x7fffffff) return cudaErrorInvalidValue;
  switch (type) {
    case BiasGradType::kF32:
      Launch<float>(dy, rows, cols, db, stream);
      break;
    case BiasGradType::kBF16:
      Launch<__nv_bfloat16>(dy, rows, cols, db, stream);
      break;
    case BiasGradType::kF16:
      Launch<__half>(dy, rows, cols, db, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ds::kernels::blas
