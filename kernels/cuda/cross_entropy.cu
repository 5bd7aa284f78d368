// Softmax cross-entropy (cross_entropy_launch.h).
//
// Forward, kernel 1 (one block per row): each thread keeps a running (max, sum of
// exp(x - max)) over its strided share of the row, rescaling the sum when the max grows
// (the online softmax normalizer); the block then merges the per-thread pairs. One read
// of the row. Kernel 2 (one block): loss = sum over rows of lse - x[target] in double, in
// a fixed order, divided by the count of non-ignored rows.
// Backward (one block per row): the count of non-ignored rows is recounted by each block
// from `targets` (rows int32 reads from L2, small next to the vocab-wide row), then
// dx += scale * (exp(x - lse) - onehot). One read of x, one read-modify-write of dx.
#include "kernels/cuda/cross_entropy_launch.h"
#include "kernels/cuda/device_util.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr int kRowThreads = 512;
constexpr int kReduceThreads = 1024;

__device__ __forceinline__ bool Ignored(int32_t t, int64_t ignore) { return t == ignore; }

template <typename T>
__global__ void LogSumExpKernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                                float* __restrict__ lse, int64_t vocab, int64_t ignore) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  if (Ignored(targets[r], ignore)) {
    if (threadIdx.x == 0) lse[r] = 0.f;
    return;
  }
  const T* x = logits + r * vocab;
  float m = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = ToF32(x[j]);
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float block_max = BlockMax(m, shared);
  const float scaled = m == -INFINITY ? 0.f : s * expf(m - block_max);
  const float total = BlockSum(scaled, shared);
  if (threadIdx.x == 0) lse[r] = block_max + logf(total);
}

template <typename T>
__global__ void LossKernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                           const float* __restrict__ lse, float* loss, int64_t rows, int64_t vocab,
                           int64_t ignore) {
  __shared__ double shared_d[32];
  __shared__ float shared_f[32];
  double sum = 0.0;
  float count = 0.f, bad = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int32_t t = targets[r];
    if (Ignored(t, ignore)) continue;
    if (t < 0 || t >= vocab) {
      bad += 1.f;
      continue;
    }
    sum += static_cast<double>(lse[r]) - ToF32(logits[r * vocab + t]);
    count += 1.f;
  }
  sum = BlockSum(sum, shared_d);
  count = BlockSum(count, shared_f);
  bad = BlockSum(bad, shared_f);
  if (threadIdx.x == 0) {
    const float v = bad > 0.f ? NAN : (count > 0.f ? static_cast<float>(sum / count) : 0.f);
    loss[0] = v;
  }
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(const T* __restrict__ logits,
                                           const int32_t* __restrict__ targets,
                                           const float* __restrict__ lse,
                                           const float* __restrict__ dloss, T* __restrict__ dx,
                                           int64_t rows, int64_t vocab, int64_t ignore) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  if (Ignored(t, ignore) || t < 0 || t >= vocab) return;
  float count = 0.f;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) count += !Ignored(targets[i], ignore);
  count = BlockSum(count, shared);
  const float scale = dloss[0] / count;
  const float l = lse[r];
  const T* x = logits + r * vocab;
  T* d = dx + r * vocab;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(ToF32(x[j]) - l);
    AddTo(d, j, scale * (j == t ? p - 1.f : p));
  }
}

template <typename T>
cudaError_t Forward(const T* logits, const int32_t* targets, float* lse, float* loss, int64_t rows,
                    int64_t vocab, int64_t ignore, cudaStream_t stream) {
  if (rows < 0 || vocab <= 0 || rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  if (rows > 0) {
    LogSumExpKernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(logits, targets,
                                                                                lse, vocab, ignore);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  LossKernel<T><<<1, kReduceThreads, 0, stream>>>(logits, targets, lse, loss, rows, vocab, ignore);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const T* logits, const int32_t* targets, const float* lse, const float* dloss,
                     T* dlogits, int64_t rows, int64_t vocab, int64_t ignore, cudaStream_t stream) {
  if (rows < 0 || vocab <= 0 || rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  if (rows == 0 || dlogits == nullptr) return cudaSuccess;
  CrossEntropyBackwardKernel<T><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, targets, lse, dloss, dlogits, rows, vocab, ignore);
  return cudaGetLastError();
}

}  // namespace

#define DS_CROSS_ENTROPY_DEFINE(T)                                                               \
  cudaError_t LaunchCrossEntropyForward(const T* logits, const int32_t* targets, float* lse,     \
                                        float* loss, int64_t rows, int64_t vocab,                \
                                        int64_t ignore_index, cudaStream_t stream) {             \
    return Forward(logits, targets, lse, loss, rows, vocab, ignore_index, stream);               \
  }                                                                                              \
  cudaError_t LaunchCrossEntropyBackward(                                                        \
      const T* logits, const int32_t* targets, const float* lse, const float* dloss, T* dlogits, \
      int64_t rows, int64_t vocab, int64_t ignore_index, cudaStream_t stream) {                  \
    return Backward(logits, targets, lse, dloss, dlogits, rows, vocab, ignore_index, stream);    \
  }

DS_CROSS_ENTROPY_DEFINE(float)
DS_CROSS_ENTROPY_DEFINE(__nv_bfloat16)
DS_CROSS_ENTROPY_DEFINE(__half)

#undef DS_CROSS_ENTROPY_DEFINE

}  // namespace ds::kernels
