// Device-side helpers shared by the .cu files in kernels/cuda/ (nvcc only; never include
// from .cc). Storage types are float or __nv_bfloat16 (and __half for the optimizer);
// every kernel loads to fp32, computes in fp32 and rounds once on store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::kernels::cuda_internal {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride loops beyond this

inline int BlocksFor(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}

// p[i] += v, in fp32, rounded once to T.
template <typename T>
__device__ __forceinline__ void AddTo(T* p, int64_t i, float v) {
  p[i] = FromF32<T>(ToF32(p[i]) + v);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the
// result. `shared` holds 32 values. Fixed order, so the result is deterministic.
template <typename F>
__device__ __forceinline__ F BlockSum(F v, F* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : F(0);
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(v);
}

// Dropout's counter-based stream: the same function of (seed, index) as the CPU kernel
// (kernels/cpu/cpu_util.h SplitMix64), so both devices drop the same elements.
__device__ __forceinline__ uint64_t SplitMix64(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace ds::kernels::cuda_internal
