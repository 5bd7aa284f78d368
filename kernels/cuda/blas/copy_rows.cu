// LaunchCopyRows (copy_rows_launch.h): a strided matrix copy for rows of any alignment.
//
// A block of 256 threads copies a segment of kSegment consecutive elements of one row:
// each thread kPerThread elements, 256 apart, so every load and store instruction of a warp
// touches 32 consecutive elements (64 or 128 bytes) whatever the row's alignment, and a
// thread has kPerThread loads in flight before its first store. blockIdx.x walks a row's
// segments, blockIdx.y (with a stride loop past 65535) the rows.
#include "kernels/cuda/blas/copy_rows_launch.h"

namespace ds::kernels::blas {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int64_t kSegment = int64_t{kThreads} * kPerThread;

template <typename T>
__global__ void CopyRowsKernel(T* __restrict__ dst, int64_t dst_ld, const T* __restrict__ src,
                               int64_t src_ld, int64_t rows, int64_t cols) {
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kSegment + threadIdx.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* s = src + r * src_ld;
    T* d = dst + r * dst_ld;
    T v[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t c = c0 + static_cast<int64_t>(i) * kThreads;
      if (c < cols) v[i] = s[c];
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t c = c0 + static_cast<int64_t>(i) * kThreads;
      if (c < cols) d[c] = v[i];
    }
  }
}

}  // namespace

cudaError_t LaunchCopyRows(void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t rows,
                           int64_t cols, int element_bytes, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || dst_ld < cols || src_ld < cols ||
      (element_bytes != 2 && element_bytes != 4))
    return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t segments = (cols + kSegment - 1) / kSegment;
  if (segments > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(segments),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  if (element_bytes == 2)
    CopyRowsKernel<uint16_t><<<grid, kThreads, 0, stream>>>(
        static_cast<uint16_t*>(dst), dst_ld, static_cast<const uint16_t*>(src), src_ld, rows, cols);
  else
    CopyRowsKernel<uint32_t><<<grid, kThreads, 0, stream>>>(
        static_cast<uint32_t*>(dst), dst_ld, static_cast<const uint32_t*>(src), src_ld, rows, cols);
  return cudaGetLastError();
}

}  // namespace ds::kernels::blas
