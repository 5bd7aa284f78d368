// layernorm and rmsnorm, forward and backward (norm_launch.h).
//
// One warp per row: lanes stride over the columns, warp shuffles reduce. Forward makes
// two passes over the row (mean, then the centered variance, as the CPU reference does;
// the second read hits L1/L2). rmsnorm is the same code with kCentered = false (no mean,
// no beta).
//
// Backward is two kernels:
//  - dx: one warp per row, dx += rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma
//    (the mean(g) term only when centered);
//  - dgamma, dbeta: column sums over all rows. A block owns 32 columns; its 32 x 8 threads
//    walk the rows (threadIdx.y strided) and reduce through shared memory in a fixed
//    order, so the result is deterministic without scratch or atomics. cols / 32 blocks is
//    few for small models, but each block streams rows at full coalescing and this kernel
//    is small next to the GEMMs around it.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/norm_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels
constexpr int kColTile = 32;
constexpr int kColRowGroups = 8;

template <typename T, bool kCentered>
__global__ void NormForwardKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ y,
                                  float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                  int64_t rows, int64_t cols, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * cols;
  float mean = 0.f;
  if (kCentered) {
    float sum = 0.f;
    for (int64_t j = lane; j < cols; j += 32) sum += ToF32(xr[j]);
    mean = WarpSum(sum) / cols;
  }
  float ss = 0.f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float d = ToF32(xr[j]) - mean;
    ss += d * d;
  }
  const float rstd = rsqrtf(WarpSum(ss) / cols + eps);
  T* yr = y + r * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    float v = (ToF32(xr[j]) - mean) * rstd * ToF32(gamma[j]);
    if (kCentered) v += ToF32(beta[j]);
    yr[j] = FromF32<T>(v);
  }
  if (lane == 0) {
    if (kCentered) mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

template <typename T, bool kCentered>
__global__ void NormBackwardDxKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                     const T* __restrict__ dy, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, T* __restrict__ dx,
                                     int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * cols;
  const T* dyr = dy + r * cols;
  const float m = kCentered ? mean[r] : 0.f, s = rstd[r];
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float g = ToF32(dyr[j]) * ToF32(gamma[j]);
    sum_g += g;
    sum_gx += g * (ToF32(xr[j]) - m) * s;
  }
  const float mean_g = kCentered ? WarpSum(sum_g) / cols : 0.f;
  const float mean_gx = WarpSum(sum_gx) / cols;
  T* dxr = dx + r * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    const float xhat = (ToF32(xr[j]) - m) * s;
    const float g = ToF32(dyr[j]) * ToF32(gamma[j]);
    AddTo(dxr, j, s * (g - mean_g - xhat * mean_gx));
  }
}

// dgamma[j] += sum_r dy[r, j] xhat[r, j]; dbeta[j] += sum_r dy[r, j] (when non-null).
template <typename T, bool kCentered>
__global__ void NormBackwardParamKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, T* dgamma, T* dbeta,
                                        int64_t rows, int64_t cols) {
  __shared__ float sg[kColRowGroups][kColTile];
  __shared__ float sb[kColRowGroups][kColTile];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  float acc_g = 0.f, acc_b = 0.f;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kColRowGroups) {
      const float d = ToF32(dy[r * cols + j]);
      const float m = kCentered ? mean[r] : 0.f;
      acc_g += d * (ToF32(x[r * cols + j]) - m) * rstd[r];
      acc_b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = acc_g;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float g = 0.f, b = 0.f;
    for (int k = 0; k < kColRowGroups; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    if (dgamma) AddTo(dgamma, j, g);
    if (dbeta) AddTo(dbeta, j, b);
  }
}

bool BadShape(int64_t rows, int64_t cols) { return rows < 0 || cols <= 0; }

int RowBlocks(int64_t rows) { return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

template <typename T, bool kCentered>
cudaError_t Forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                    int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (BadShape(rows, cols)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  NormForwardKernel<T, kCentered><<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      x, gamma, beta, y, mean, rstd, rows, cols, eps);
  return cudaGetLastError();
}

template <typename T, bool kCentered>
cudaError_t Backward(const T* x, const T* gamma, const T* dy, const float* mean, const float* rstd,
                     T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (BadShape(rows, cols)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (dx) {
    NormBackwardDxKernel<T, kCentered><<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
        x, gamma, dy, mean, rstd, dx, rows, cols);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (dgamma || dbeta) {
    const int blocks = static_cast<int>((cols + kColTile - 1) / kColTile);
    NormBackwardParamKernel<T, kCentered><<<blocks, dim3(kColTile, kColRowGroups), 0, stream>>>(
        x, dy, mean, rstd, dgamma, dbeta, rows, cols);
  }
  return cudaGetLastError();
}

}  // namespace

#define DS_NORM_DEFINE(T)                                                                          \
  cudaError_t LaunchLayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean, \
                                     float* rstd, int64_t rows, int64_t cols, float eps,           \
                                     cudaStream_t stream) {                                        \
    return Forward<T, true>(x, gamma, beta, y, mean, rstd, rows, cols, eps, stream);               \
  }                                                                                                \
  cudaError_t LaunchLayerNormBackward(const T* x, const T* gamma, const T* dy, const float* mean,  \
                                      const float* rstd, T* dx, T* dgamma, T* dbeta, int64_t rows, \
                                      int64_t cols, cudaStream_t stream) {                         \
    return Backward<T, true>(x, gamma, dy, mean, rstd, dx, dgamma, dbeta, rows, cols, stream);     \
  }                                                                                                \
  cudaError_t LaunchRmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int64_t rows,    \
                                   int64_t cols, float eps, cudaStream_t stream) {                 \
    return Forward<T, false>(x, gamma, nullptr, y, nullptr, rstd, rows, cols, eps, stream);        \
  }                                                                                                \
  cudaError_t LaunchRmsNormBackward(const T* x, const T* gamma, const T* dy, const float* rstd,    \
                                    T* dx, T* dgamma, int64_t rows, int64_t cols,                  \
                                    cudaStream_t stream) {                                         \
    return Backward<T, false>(x, gamma, dy, nullptr, rstd, dx, dgamma, nullptr, rows, cols,        \
                              stream);                                                             \
  }

DS_NORM_DEFINE(float)
DS_NORM_DEFINE(__nv_bfloat16)
DS_NORM_DEFINE(__half)

#undef DS_NORM_DEFINE

}  // namespace ds::kernels
