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
//  - dgamma, dbeta: column sums over all rows, in two deterministic stages (no atomics).
//    Stage one: a block owns 32 columns of a slice of at most kParamRows rows; its 32 x 8
//    threads walk the slice (threadIdx.y strided), reduce through shared memory in a fixed
//    order and write one partial row per slice into a scratch buffer. Stage two sums the
//    partials of each column in slice order. One block per 32 columns alone (24 blocks for
//    a 768-wide model on a 132-SM H200) left most of the GPU idle: 0.4 ms per call at
//    GPT-2 124M's 16384 x 768, the slowest kernel of its backward after the GEMMs.
//    The scratch (2 x slices x cols floats) is kept per (device, stream) and only grows.
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/device_util.h"
#include "kernels/cuda/norm_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels
constexpr int kColTile = 32;
constexpr int kColRowGroups = 8;
constexpr int64_t kParamRows = 64;        // rows per stage-one slice
constexpr int64_t kMaxParamSlices = 512;  // more rows than 512 x 64: longer slices

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

// Stage one: part_g[s, j] = sum over slice s of dy[r, j] xhat[r, j]; part_b[s, j] of dy[r, j].
template <typename T, bool kCentered>
__global__ void NormParamPartialKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                       const float* __restrict__ mean,
                                       const float* __restrict__ rstd, float* __restrict__ part_g,
                                       float* __restrict__ part_b, int64_t rows, int64_t cols,
                                       int64_t slice_rows) {
  __shared__ float sg[kColRowGroups][kColTile];
  __shared__ float sb[kColRowGroups][kColTile];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * slice_rows;
  const int64_t r_end = r_begin + slice_rows < rows ? r_begin + slice_rows : rows;
  float acc_g = 0.f, acc_b = 0.f;
  if (j < cols) {
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kColRowGroups) {
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
    part_g[blockIdx.y * cols + j] = g;
    part_b[blockIdx.y * cols + j] = b;
  }
}

// Stage two: dgamma[j] += sum_s part_g[s, j]; dbeta[j] += sum_s part_b[s, j] (when non-null).
template <typename T>
__global__ void NormParamFinishKernel(const float* __restrict__ part_g,
                                      const float* __restrict__ part_b, int64_t slices,
                                      int64_t cols, T* dgamma, T* dbeta) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float g = 0.f, b = 0.f;
  for (int64_t s = 0; s < slices; ++s) {
    g += part_g[s * cols + j];
    b += part_b[s * cols + j];
  }
  if (dgamma) AddTo(dgamma, j, g);
  if (dbeta) AddTo(dbeta, j, b);
}

// The partials' scratch for `stream` on the current device: at least `bytes`, grown (never
// shrunk) on demand; cudaFree of a smaller one waits for the device, so no kernel still
// reads it.
cudaError_t ParamScratch(size_t bytes, cudaStream_t stream, float** out) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, std::pair<void*, size_t>> buffers;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  std::pair<void*, size_t>& b = buffers[{device, stream}];
  if (b.second < bytes) {
    if (b.first != nullptr && (err = cudaFree(b.first)) != cudaSuccess) return err;
    b = {nullptr, 0};
    if ((err = cudaMalloc(&b.first, bytes)) != cudaSuccess) return err;
    b.second = bytes;
  }
  *out = static_cast<float*>(b.first);
  return cudaSuccess;
}

template <typename T, bool kCentered>
cudaError_t ParamBackward(const T* x, const T* dy, const float* mean, const float* rstd, T* dgamma,
                          T* dbeta, int64_t rows, int64_t cols, cudaStream_t stream) {
  int64_t slices = (rows + kParamRows - 1) / kParamRows;
  if (slices > kMaxParamSlices) slices = kMaxParamSlices;
  const int64_t slice_rows = (rows + slices - 1) / slices;
  slices = (rows + slice_rows - 1) / slice_rows;
  float* part = nullptr;
  const cudaError_t err = ParamScratch(2 * slices * cols * sizeof(float), stream, &part);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                  static_cast<unsigned>(slices));
  NormParamPartialKernel<T, kCentered><<<grid, dim3(kColTile, kColRowGroups), 0, stream>>>(
      x, dy, mean, rstd, part, part + slices * cols, rows, cols, slice_rows);
  NormParamFinishKernel<T><<<static_cast<unsigned>((cols + 255) / 256), 256, 0, stream>>>(
      part, part + slices * cols, slices, cols, dgamma, dbeta);
  return cudaGetLastError();
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
  if (dgamma || dbeta)
    return ParamBackward<T, kCentered>(x, dy, mean, rstd, dgamma, dbeta, rows, cols, stream);
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
