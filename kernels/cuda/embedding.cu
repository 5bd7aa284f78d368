// Token embedding and learned position embedding, forward and backward
// (embedding_launch.h).
//
// Embedding backward is a scatter-add where ids repeat. Instead of atomics (whose order,
// and so whose rounding, changes run to run) the work is split so each (vocab range,
// 32-column tile) has one warp: the warp scans every id in order and adds the rows whose id
// falls in its range. Each dweight element therefore sums its tokens in token order, as the
// CPU kernel does, and results are bit-identical run to run. The id scan is n int32 reads
// per warp from L2; the gradient rows are read once.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/embedding_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

constexpr int kVocabSplits = 128;  // vocab ranges in the backward grid

template <typename T>
__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ ids,
                                       const T* __restrict__ weight, T* __restrict__ out, int64_t n,
                                       int64_t vocab, int64_t cols) {
  const int64_t total = n * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t i = e / cols, j = e - i * cols;
    const int32_t id = ids[i];
    out[e] = (id >= 0 && id < vocab) ? weight[id * cols + j] : FromF32<T>(NAN);
  }
}

// grid (column tiles, kVocabSplits), one warp per block.
template <typename T>
__global__ void EmbeddingBackwardKernel(const int32_t* __restrict__ ids, const T* __restrict__ dout,
                                        T* __restrict__ dweight, int64_t n, int64_t vocab,
                                        int64_t cols) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t lo = vocab * blockIdx.y / gridDim.y, hi = vocab * (blockIdx.y + 1) / gridDim.y;
  if (lo >= hi) return;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < lo || id >= hi || j >= cols) continue;
    AddTo(dweight, id * cols + j, ToF32(dout[i * cols + j]));
  }
}

template <typename T>
__global__ void PositionForwardKernel(const T* __restrict__ x, const T* __restrict__ wpe,
                                      T* __restrict__ out, int64_t total, int64_t seq,
                                      int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t row = e / cols, j = e - row * cols;
    out[e] = FromF32<T>(ToF32(x[e]) + ToF32(wpe[(row % seq) * cols + j]));
  }
}

// dwpe[t, j] += sum_b dout[b, t, j]: one thread per (t, j), batches in order.
template <typename T>
__global__ void PositionBackwardKernel(const T* __restrict__ dout, T* __restrict__ dwpe,
                                       int64_t batch, int64_t seq, int64_t cols) {
  const int64_t total = seq * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    float sum = 0.f;
    for (int64_t b = 0; b < batch; ++b) sum += ToF32(dout[b * total + e]);
    AddTo(dwpe, e, sum);
  }
}

template <typename T>
__global__ void AccumulateKernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    AddTo(dst, i, ToF32(src[i]));
}

template <typename T>
cudaError_t EmbeddingForward(const int32_t* ids, const T* weight, T* out, int64_t n, int64_t vocab,
                             int64_t cols, cudaStream_t stream) {
  if (n < 0 || vocab < 0 || cols < 0) return cudaErrorInvalidValue;
  if (n == 0 || cols == 0) return cudaSuccess;
  EmbeddingForwardKernel<T>
      <<<BlocksFor(n * cols), kThreads, 0, stream>>>(ids, weight, out, n, vocab, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t EmbeddingBackward(const int32_t* ids, const T* dout, T* dweight, int64_t n,
                              int64_t vocab, int64_t cols, cudaStream_t stream) {
  if (n < 0 || vocab < 0 || cols < 0) return cudaErrorInvalidValue;
  if (n == 0 || cols == 0 || vocab == 0 || dweight == nullptr) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                  static_cast<unsigned>(vocab < kVocabSplits ? vocab : kVocabSplits));
  EmbeddingBackwardKernel<T><<<grid, 32, 0, stream>>>(ids, dout, dweight, n, vocab, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t PositionForward(const T* x, const T* wpe, T* out, int64_t batch, int64_t seq,
                            int64_t cols, cudaStream_t stream) {
  if (batch < 0 || seq < 0 || cols < 0) return cudaErrorInvalidValue;
  const int64_t total = batch * seq * cols;
  if (total == 0) return cudaSuccess;
  PositionForwardKernel<T>
      <<<BlocksFor(total), kThreads, 0, stream>>>(x, wpe, out, total, seq, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t PositionBackward(const T* dout, T* dx, T* dwpe, int64_t batch, int64_t seq,
                             int64_t cols, cudaStream_t stream) {
  if (batch < 0 || seq < 0 || cols < 0) return cudaErrorInvalidValue;
  const int64_t total = batch * seq * cols;
  if (total == 0) return cudaSuccess;
  if (dx) AccumulateKernel<T><<<BlocksFor(total), kThreads, 0, stream>>>(dout, dx, total);
  if (dwpe)
    PositionBackwardKernel<T>
        <<<BlocksFor(seq * cols), kThreads, 0, stream>>>(dout, dwpe, batch, seq, cols);
  return cudaGetLastError();
}

}  // namespace

#define DS_EMBEDDING_DEFINE(T)                                                                  \
  cudaError_t LaunchEmbeddingForward(const int32_t* ids, const T* weight, T* out, int64_t n,    \
                                     int64_t vocab, int64_t cols, cudaStream_t stream) {        \
    return EmbeddingForward(ids, weight, out, n, vocab, cols, stream);                          \
  }                                                                                             \
  cudaError_t LaunchEmbeddingBackward(const int32_t* ids, const T* dout, T* dweight, int64_t n, \
                                      int64_t vocab, int64_t cols, cudaStream_t stream) {       \
    return EmbeddingBackward(ids, dout, dweight, n, vocab, cols, stream);                       \
  }                                                                                             \
  cudaError_t LaunchPositionEmbeddingForward(const T* x, const T* wpe, T* out, int64_t batch,   \
                                             int64_t seq, int64_t cols, cudaStream_t stream) {  \
    return PositionForward(x, wpe, out, batch, seq, cols, stream);                              \
  }                                                                                             \
  cudaError_t LaunchPositionEmbeddingBackward(const T* dout, T* dx, T* dwpe, int64_t batch,     \
                                              int64_t seq, int64_t cols, cudaStream_t stream) { \
    return PositionBackward(dout, dx, dwpe, batch, seq, cols, stream);                          \
  }

DS_EMBEDDING_DEFINE(float)
DS_EMBEDDING_DEFINE(__nv_bfloat16)
DS_EMBEDDING_DEFINE(__half)

#undef DS_EMBEDDING_DEFINE

}  // namespace ds::kernels
