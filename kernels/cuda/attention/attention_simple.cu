// Causal attention, the simple path: fp32 (and bf16 with head dims the flash kernels do not
// take), any D <= 256. Correct and plain, not fast: one warp per row, lane l holds elements
// d = l, l + 32, ... of each D-vector in fp32, dot products reduce across the warp.
//
//   forward   warp per (b, h, i): online softmax over keys j <= i,
//             m' = max(m, s_j), c = e^(m - m'), l = c l + e^(s_j - m'), o = c o + e^(s_j - m') v_j,
//             out = o / l, lse = m + ln l                       s_j = scale q_i . k_j
//   backward  P_ij = e^(s_ij - lse_i), dP_ij = dO_i . v_j, dS_ij = P_ij (dP_ij - D_i)
//             dQ:     warp per (b, h, i):   dq_i += scale sum_{j<=i} dS_ij k_j
//             dK, dV: warp per (b, kv, j):  over the group's heads h and rows i >= j,
//                     dk_j += scale sum dS_ij q_i, dv_j += sum P_ij dO_i
//   Each output row has one writer, so no atomics and the result is deterministic.
//   D_i = rowsum(dO_i * O_i) (LaunchRowDot, also used by the flash path).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention/attention_launch.h"

namespace ds::kernels::attention::internal {
namespace {

constexpr int kPerLane = static_cast<int>(kMaxHeadDim / 32);
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct Geometry {
  int64_t row;     // elements per token of qkv
  int64_t out_ld;  // elements per token of out (H D)
  int seq, n_head, n_kv_head, head_dim;
  float scale;
};

// Loads a D-vector into the lane's registers (fp32); zeros past D.
template <typename T>
__device__ __forceinline__ void LoadVec(float (&v)[kPerLane], const T* src, int head_dim,
                                        int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    v[i] = d < head_dim ? Load(src + d) : 0.f;
  }
}

template <typename T>
__device__ __forceinline__ float Dot(const float (&a)[kPerLane], const T* b, int head_dim,
                                     int lane) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) s += a[i] * Load(b + d);
  }
  return WarpSum(s);
}

// Global warp index and lane; false when the warp has no row.
__device__ __forceinline__ bool WarpRow(int64_t rows, int64_t* r, int* lane) {
  *r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  *lane = threadIdx.x % 32;
  return *r < rows;
}

template <typename T>
__global__ void SimpleForwardKernel(const T* __restrict__ qkv, T* __restrict__ out,
                                    float* __restrict__ lse, Geometry g, int64_t rows) {
  int64_t r;
  int lane;
  if (!WarpRow(rows, &r, &lane)) return;
  const int i = static_cast<int>(r % g.seq);
  const int64_t bh = r / g.seq;
  const int h = static_cast<int>(bh % g.n_head);
  const int64_t b = bh / g.n_head;
  const int kv = h / (g.n_head / g.n_kv_head);
  const T* seq_base = qkv + b * g.seq * g.row;
  float q[kPerLane], o[kPerLane];
  LoadVec(q, seq_base + i * g.row + static_cast<int64_t>(h) * g.head_dim, g.head_dim, lane);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) o[e] = 0.f;
  const T* k = seq_base + static_cast<int64_t>(g.n_head + kv) * g.head_dim;
  const T* v = seq_base + static_cast<int64_t>(g.n_head + g.n_kv_head + kv) * g.head_dim;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j <= i; ++j) {
    const float s = g.scale * Dot(q, k + j * g.row, g.head_dim, lane);
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new), pj = expf(s - m_new);
    l = c * l + pj;
    const T* vj = v + j * g.row;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      o[e] = c * o[e] + (d < g.head_dim ? pj * Load(vj + d) : 0.f);
    }
    m = m_new;
  }
  T* dst = out + (b * g.seq + i) * g.out_ld + static_cast<int64_t>(h) * g.head_dim;
  const float inv = 1.f / l;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < g.head_dim) Store(dst + d, o[e] * inv);
  }
  if (lane == 0) lse[bh * g.seq + i] = m + logf(l);
}

template <typename T>
__global__ void RowDotKernel(const T* __restrict__ out, const T* __restrict__ dout,
                             float* __restrict__ d_rows, Geometry g, int64_t rows) {
  int64_t r;
  int lane;
  if (!WarpRow(rows, &r, &lane)) return;
  const int i = static_cast<int>(r % g.seq);
  const int64_t bh = r / g.seq;
  const int h = static_cast<int>(bh % g.n_head);
  const int64_t b = bh / g.n_head;
  const int64_t off = (b * g.seq + i) * g.out_ld + static_cast<int64_t>(h) * g.head_dim;
  float s = 0.f;
  for (int d = lane; d < g.head_dim; d += 32) s += Load(out + off + d) * Load(dout + off + d);
  s = WarpSum(s);
  if (lane == 0) d_rows[r] = s;
}

template <typename T>
__global__ void SimpleDqKernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                               const float* __restrict__ lse, const float* __restrict__ d_rows,
                               T* dqkv, Geometry g, int64_t rows) {
  int64_t r;
  int lane;
  if (!WarpRow(rows, &r, &lane)) return;
  const int i = static_cast<int>(r % g.seq);
  const int64_t bh = r / g.seq;
  const int h = static_cast<int>(bh % g.n_head);
  const int64_t b = bh / g.n_head;
  const int kv = h / (g.n_head / g.n_kv_head);
  const T* seq_base = qkv + b * g.seq * g.row;
  float q[kPerLane], go[kPerLane], dq[kPerLane];
  LoadVec(q, seq_base + i * g.row + static_cast<int64_t>(h) * g.head_dim, g.head_dim, lane);
  LoadVec(go, dout + (b * g.seq + i) * g.out_ld + static_cast<int64_t>(h) * g.head_dim, g.head_dim,
          lane);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) dq[e] = 0.f;
  const T* k = seq_base + static_cast<int64_t>(g.n_head + kv) * g.head_dim;
  const T* v = seq_base + static_cast<int64_t>(g.n_head + g.n_kv_head + kv) * g.head_dim;
  const float lse_i = lse[r], di = d_rows[r];
  for (int j = 0; j <= i; ++j) {
    const float pij = expf(g.scale * Dot(q, k + j * g.row, g.head_dim, lane) - lse_i);
    const float ds = pij * (Dot(go, v + j * g.row, g.head_dim, lane) - di);
    const T* kj = k + j * g.row;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < g.head_dim) dq[e] += ds * Load(kj + d);
    }
  }
  T* dst = dqkv + (b * g.seq + i) * g.row + static_cast<int64_t>(h) * g.head_dim;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < g.head_dim) Store(dst + d, Load(dst + d) + g.scale * dq[e]);
  }
}

template <typename T>
__global__ void SimpleDkvKernel(const T* __restrict__ qkv, const T* __restrict__ dout,
                                const float* __restrict__ lse, const float* __restrict__ d_rows,
                                T* dqkv, Geometry g, int64_t rows) {
  int64_t r;
  int lane;
  if (!WarpRow(rows, &r, &lane)) return;
  const int j = static_cast<int>(r % g.seq);
  const int64_t bkv = r / g.seq;
  const int kv = static_cast<int>(bkv % g.n_kv_head);
  const int64_t b = bkv / g.n_kv_head;
  const int group = g.n_head / g.n_kv_head;
  const T* seq_base = qkv + b * g.seq * g.row;
  float k[kPerLane], v[kPerLane], dk[kPerLane], dv[kPerLane];
  const int64_t k_off = static_cast<int64_t>(g.n_head + kv) * g.head_dim;
  const int64_t v_off = static_cast<int64_t>(g.n_head + g.n_kv_head + kv) * g.head_dim;
  LoadVec(k, seq_base + j * g.row + k_off, g.head_dim, lane);
  LoadVec(v, seq_base + j * g.row + v_off, g.head_dim, lane);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) dk[e] = dv[e] = 0.f;
  for (int h = kv * group; h < (kv + 1) * group; ++h) {
    const float* lse_h = lse + (b * g.n_head + h) * g.seq;
    const float* di_h = d_rows + (b * g.n_head + h) * g.seq;
    for (int i = j; i < g.seq; ++i) {
      const T* qi = seq_base + i * g.row + static_cast<int64_t>(h) * g.head_dim;
      const T* goi = dout + (b * g.seq + i) * g.out_ld + static_cast<int64_t>(h) * g.head_dim;
      const float pij = expf(g.scale * Dot(k, qi, g.head_dim, lane) - lse_h[i]);
      const float ds = pij * (Dot(v, goi, g.head_dim, lane) - di_h[i]);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int d = lane + 32 * e;
        if (d < g.head_dim) {
          dv[e] += pij * Load(goi + d);
          dk[e] += ds * Load(qi + d);
        }
      }
    }
  }
  T* dst = dqkv + (b * g.seq + j) * g.row;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < g.head_dim) {
      Store(dst + k_off + d, Load(dst + k_off + d) + g.scale * dk[e]);
      Store(dst + v_off + d, Load(dst + v_off + d) + dv[e]);
    }
  }
}

Geometry MakeGeometry(const AttentionShape& s) {
  Geometry g;
  g.row = s.row();
  g.out_ld = s.n_head * s.head_dim;
  g.seq = static_cast<int>(s.seq);
  g.n_head = static_cast<int>(s.n_head);
  g.n_kv_head = static_cast<int>(s.n_kv_head);
  g.head_dim = static_cast<int>(s.head_dim);
  g.scale = 1.f / sqrtf(static_cast<float>(s.head_dim));
  return g;
}

// Grid for one warp per row.
unsigned Blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
constexpr int kBlockThreads = kWarpsPerBlock * 32;

template <typename T>
cudaError_t Forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                    cudaStream_t stream) {
  const int64_t rows = s.batch * s.n_head * s.seq;
  SimpleForwardKernel<T><<<Blocks(rows), kBlockThreads, 0, stream>>>(
      static_cast<const T*>(qkv), static_cast<T*>(out), lse, MakeGeometry(s), rows);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const AttentionShape& s, const void* qkv, const void* dout, const float* lse,
                     const float* d_rows, void* dqkv, cudaStream_t stream) {
  const Geometry g = MakeGeometry(s);
  const int64_t q_rows = s.batch * s.n_head * s.seq, kv_rows = s.batch * s.n_kv_head * s.seq;
  SimpleDqKernel<T><<<Blocks(q_rows), kBlockThreads, 0, stream>>>(
      static_cast<const T*>(qkv), static_cast<const T*>(dout), lse, d_rows, static_cast<T*>(dqkv),
      g, q_rows);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  SimpleDkvKernel<T><<<Blocks(kv_rows), kBlockThreads, 0, stream>>>(
      static_cast<const T*>(qkv), static_cast<const T*>(dout), lse, d_rows, static_cast<T*>(dqkv),
      g, kv_rows);
  return cudaGetLastError();
}

template <typename T>
cudaError_t RowDot(const AttentionShape& s, const void* out, const void* dout, float* d_rows,
                   cudaStream_t stream) {
  const int64_t rows = s.batch * s.n_head * s.seq;
  RowDotKernel<T><<<Blocks(rows), kBlockThreads, 0, stream>>>(
      static_cast<const T*>(out), static_cast<const T*>(dout), d_rows, MakeGeometry(s), rows);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSimpleForward(const AttentionShape& s, AttentionType t, const void* qkv,
                                void* out, float* lse, cudaStream_t stream) {
  if (s.batch * s.seq == 0) return cudaSuccess;
  if (t == AttentionType::kF16) return Forward<__half>(s, qkv, out, lse, stream);
  return t == AttentionType::kBF16 ? Forward<__nv_bfloat16>(s, qkv, out, lse, stream)
                                   : Forward<float>(s, qkv, out, lse, stream);
}

cudaError_t LaunchSimpleBackward(const AttentionShape& s, AttentionType t, const void* qkv,
                                 const void* dout, const float* lse, const float* d_rows,
                                 void* dqkv, cudaStream_t stream) {
  if (s.batch * s.seq == 0) return cudaSuccess;
  if (t == AttentionType::kF16) return Backward<__half>(s, qkv, dout, lse, d_rows, dqkv, stream);
  return t == AttentionType::kBF16
             ? Backward<__nv_bfloat16>(s, qkv, dout, lse, d_rows, dqkv, stream)
             : Backward<float>(s, qkv, dout, lse, d_rows, dqkv, stream);
}

cudaError_t LaunchRowDot(const AttentionShape& s, AttentionType t, const void* out,
                         const void* dout, float* d_rows, cudaStream_t stream) {
  if (s.batch * s.seq == 0) return cudaSuccess;
  if (t == AttentionType::kF16) return RowDot<__half>(s, out, dout, d_rows, stream);
  return t == AttentionType::kBF16 ? RowDot<__nv_bfloat16>(s, out, dout, d_rows, stream)
                                   : RowDot<float>(s, out, dout, d_rows, stream);
}

}  // namespace ds::kernels::attention::internal
