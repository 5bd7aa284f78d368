// Rotary position embedding on packed qkv (LaunchRope in embedding_launch.h).
//
// One thread per element of a row: a thread at rotated offset d < D/2 of a q or k head
// handles the pair (d, d + D/2); its partner thread at d >= D/2 does nothing; v elements
// are copied (or added). cos/sin are computed in the kernel the way the CPU table is
// built (Hugging Face, fp32): inv_freq = float(1 / theta^(2i/D)), angle = float(t) *
// inv_freq in fp32, cos and sin of that float evaluated in double and rounded to float, so
// the two devices rotate by the same fp32 factors. No table, no allocation.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/embedding_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

template <typename T>
__global__ void RopeKernel(const T* __restrict__ src, T* __restrict__ dst, int64_t rows,
                           int64_t seq, int64_t row, int64_t rotated, int64_t head_dim,
                           double theta, float sign, bool accumulate) {
  const int64_t total = rows * row, half = head_dim / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t r = e / row, k = e - r * row;
    if (k >= rotated) {  // v heads
      const float v = ToF32(src[e]);
      dst[e] = FromF32<T>(accumulate ? ToF32(dst[e]) + v : v);
      continue;
    }
    const int64_t i = k % head_dim;
    if (i >= half) continue;  // the partner thread
    const float inv_freq =
        static_cast<float>(1.0 / pow(theta, 2.0 * static_cast<double>(i) / head_dim));
    const float angle = static_cast<float>(r % seq) * inv_freq;
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = sign * static_cast<float>(sin(static_cast<double>(angle)));
    const float a = ToF32(src[e]), b = ToF32(src[e + half]);
    float ra = a * c - b * s, rb = b * c + a * s;
    if (accumulate) {
      ra += ToF32(dst[e]);
      rb += ToF32(dst[e + half]);
    }
    dst[e] = FromF32<T>(ra);
    dst[e + half] = FromF32<T>(rb);
  }
}

template <typename T>
cudaError_t Rope(const T* src, T* dst, int64_t batch, int64_t seq, int64_t n_head,
                 int64_t n_kv_head, int64_t head_dim, double theta, float sign, bool accumulate,
                 cudaStream_t stream) {
  if (batch < 0 || seq < 0 || n_head <= 0 || n_kv_head <= 0 || head_dim <= 0 || head_dim % 2 != 0 ||
      !(theta > 0.0))
    return cudaErrorInvalidValue;
  const int64_t row = (n_head + 2 * n_kv_head) * head_dim, rows = batch * seq;
  if (rows == 0) return cudaSuccess;
  RopeKernel<T><<<BlocksFor(rows * row), kThreads, 0, stream>>>(
      src, dst, rows, seq, row, (n_head + n_kv_head) * head_dim, head_dim, theta, sign, accumulate);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRope(const float* src, float* dst, int64_t batch, int64_t seq, int64_t n_head,
                       int64_t n_kv_head, int64_t head_dim, double theta, float sign,
                       bool accumulate, cudaStream_t stream) {
  return Rope(src, dst, batch, seq, n_head, n_kv_head, head_dim, theta, sign, accumulate, stream);
}
cudaError_t LaunchRope(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t batch, int64_t seq,
                       int64_t n_head, int64_t n_kv_head, int64_t head_dim, double theta,
                       float sign, bool accumulate, cudaStream_t stream) {
  return Rope(src, dst, batch, seq, n_head, n_kv_head, head_dim, theta, sign, accumulate, stream);
}
cudaError_t LaunchRope(const __half* src, __half* dst, int64_t batch, int64_t seq, int64_t n_head,
                       int64_t n_kv_head, int64_t head_dim, double theta, float sign,
                       bool accumulate, cudaStream_t stream) {
  return Rope(src, dst, batch, seq, n_head, n_kv_head, head_dim, theta, sign, accumulate, stream);
}

}  // namespace ds::kernels
