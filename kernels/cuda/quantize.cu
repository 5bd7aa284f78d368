// ZeRO++'s block quantization on the device (quantize_launch.h): one thread block per
// quantization block (grid-stride over blocks): the block's max |x| by a shared-memory
// reduction, then every value scaled and rounded to nearest even with the host's operations
// (IEEE division and product, no contraction), so host and device give the same bytes.
#include "kernels/cuda/device_util.h"
#include "kernels/cuda/quantize_launch.h"

namespace ds::kernels {
namespace {

using namespace cuda_internal;  // NOLINT: the helpers of this directory

__device__ float BlockAbsMax(float v, float* shared) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? shared[lane] : 0.f;
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float amax = shared[0];
  __syncthreads();  // shared is reused by the next block of the loop
  return amax;
}

__device__ int Scaled(float x, float inv) { return __float2int_rn(__fmul_rn(x, inv)); }

template <typename T>
__global__ void QuantizeKernel(const T* __restrict__ x, int64_t n, int bits, int64_t block,
                               int8_t* __restrict__ q, float* __restrict__ scales) {
  __shared__ float shared[32];
  const float qmax = bits == 8 ? 127.f : 7.f;
  const int64_t blocks = (n + block - 1) / block;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t at = b * block, m = n - at < block ? n - at : block;
    float local = 0.f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x)
      local = fmaxf(local, fabsf(ToF32(x[at + i])));
    const float amax = BlockAbsMax(local, shared);
    const bool zero = amax == 0.f, finite = isfinite(amax);
    const float inv = zero || !finite ? 0.f : __fdiv_rn(qmax, amax);
    if (threadIdx.x == 0) scales[b] = zero ? 0.f : finite ? __fdiv_rn(amax, qmax) : nanf("");
    if (bits == 8) {
      for (int64_t i = threadIdx.x; i < m; i += blockDim.x)
        q[at + i] = static_cast<int8_t>(Scaled(ToF32(x[at + i]), inv));
      continue;
    }
    for (int64_t i = 2 * threadIdx.x; i < m; i += 2 * blockDim.x) {  // at is even: whole bytes
      const int lo = Scaled(ToF32(x[at + i]), inv) & 0xF;
      const int hi = i + 1 < m ? Scaled(ToF32(x[at + i + 1]), inv) & 0xF : 0;
      q[(at + i) / 2] = static_cast<int8_t>(lo | hi << 4);
    }
  }
}

template <typename T>
__global__ void DequantizeKernel(const int8_t* __restrict__ q, const float* __restrict__ scales,
                                 int64_t n, int bits, int64_t block, T* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int v = q[bits == 8 ? i : i / 2];
    if (bits == 4) {
      v = (static_cast<uint8_t>(v) >> (i % 2 * 4)) & 0xF;
      v = v >= 8 ? v - 16 : v;
    }
    y[i] = FromF32<T>(__fmul_rn(static_cast<float>(v), scales[i / block]));
  }
}

bool BadSpec(int64_t n, int bits, int64_t block) {
  return n < 0 || block < 1 || (bits != 8 && bits != 4) || (bits == 4 && block % 2 != 0);
}

template <typename T>
cudaError_t Quantize(const T* x, int64_t n, int bits, int64_t block, int8_t* q, float* scales,
                     cudaStream_t stream) {
  if (BadSpec(n, bits, block)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + block - 1) / block;
  const int grid = static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  QuantizeKernel<T><<<grid, kThreads, 0, stream>>>(x, n, bits, block, q, scales);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Dequantize(const int8_t* q, const float* scales, int64_t n, int bits, int64_t block,
                       T* y, cudaStream_t stream) {
  if (BadSpec(n, bits, block)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  DequantizeKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(q, scales, n, bits, block, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBlockQuantize(const float* x, int64_t n, int bits, int64_t block, int8_t* q,
                                float* scales, cudaStream_t stream) {
  return Quantize(x, n, bits, block, q, scales, stream);
}
cudaError_t LaunchBlockQuantize(const __nv_bfloat16* x, int64_t n, int bits, int64_t block,
                                int8_t* q, float* scales, cudaStream_t stream) {
  return Quantize(x, n, bits, block, q, scales, stream);
}
cudaError_t LaunchBlockDequantize(const int8_t* q, const float* scales, int64_t n, int bits,
                                  int64_t block, float* y, cudaStream_t stream) {
  return Dequantize(q, scales, n, bits, block, y, stream);
}
cudaError_t LaunchBlockDequantize(const int8_t* q, const float* scales, int64_t n, int bits,
                                  int64_t block, __nv_bfloat16* y, cudaStream_t stream) {
  return Dequantize(q, scales, n, bits, block, y, stream);
}

}  // namespace ds::kernels
