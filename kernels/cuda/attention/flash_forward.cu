// Causal attention forward, bf16 storage, tensor cores (FlashAttention-2 style).
//
// One block = one (b, h) and a block of kBr = 64 query rows; 4 warps, warp w owns rows
// 16w..16w+15 and keeps, in registers, its Q fragments, the O accumulator [16, D] (fp32),
// and per row the running max m and (per-thread partial) sum l. Key/value tiles of
// kBc = 64 rows stream through double-buffered shared memory (cp.async: tile j + 1 loads
// while tile j is used). Per key tile, in the log2 domain (x2 = x log2 e):
//   S   = scale Q K^T                       (mma, fp32)           [16, 64] per warp
//   S   = -inf where key > query            (only tiles crossing the diagonal)
//   m'  = max(m, rowmax S);  c = 2^(m - m');  P = 2^(S - m')
//   l   = c l + rowsum P;    O = c O + P V  (P packed to bf16 in registers, Note [Fragment
//                                             layouts] in mma_util.cuh)
// and at the end O /= l, lse = (m + log2 l) ln 2 (natural log, as the CPU op saves).
// Key tiles past the diagonal are never loaded; tiles entirely above a warp's rows are
// skipped by that warp. Rows >= T and keys >= T are zero-filled in shared memory; causal
// masking hides the keys, and rows >= T are not stored. Blocks run the longest query
// blocks first (blockIdx.y 0 is the last query block).
//
// Shared memory: Q [64, D] + 2 x (K, V) [64, D] bf16 = 80 KiB at D = 128, 40 KiB at 64.
#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/mma_util.cuh"

namespace ds::kernels::attention::internal {
namespace {

constexpr int kBr = 64;
constexpr int kBc = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

struct ForwardParams {
  const bf16* qkv;
  bf16* out;
  float* lse;
  int64_t row;  // elements per token of qkv
  int seq, n_head, n_kv_head;
  float scale_log2;  // scale * log2 e
};

template <int D>
constexpr int ForwardSmemBytes() {
  return (kBr + 4 * kBc) * D * static_cast<int>(sizeof(bf16));
}

template <int D>
__global__ void __launch_bounds__(kThreads) FlashForwardKernel(const ForwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_q = reinterpret_cast<bf16*>(smem);
  bf16* s_k = s_q + kBr * D;      // [2][kBc][D]
  bf16* s_v = s_k + 2 * kBc * D;  // [2][kBc][D]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int qb = gridDim.y - 1 - blockIdx.y;
  const int bh = blockIdx.x, b = bh / p.n_head, h = bh % p.n_head;
  const int kv = h / (p.n_head / p.n_kv_head);
  const int q0 = qb * kBr, T = p.seq;
  const bf16* base = p.qkv + static_cast<int64_t>(b) * T * p.row;
  const bf16* g_q = base + static_cast<int64_t>(h) * D;
  const bf16* g_k = base + static_cast<int64_t>(p.n_head + kv) * D;
  const bf16* g_v = base + static_cast<int64_t>(p.n_head + p.n_kv_head + kv) * D;
  // Keys [0, min(q0 + kBr, T)) matter.
  const int last_key = min(q0 + kBr, T) - 1;
  const int n_kb = last_key / kBc + 1;

  LoadTile<kBr, D, kThreads>(s_q, g_q, p.row, q0, T);
  LoadTile<kBc, D, kThreads>(s_k, g_k, p.row, 0, T);
  LoadTile<kBc, D, kThreads>(s_v, g_v, p.row, 0, T);
  CpAsyncCommit();

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int warp_row0 = q0 + warp * 16;  // first query row of this warp
  const int row_a = warp_row0 + g, row_b = row_a + 8;

  for (int kb = 0; kb < n_kb; ++kb) {
    const int buf = kb & 1;
    if (kb + 1 < n_kb) {
      LoadTile<kBc, D, kThreads>(s_k + (buf ^ 1) * kBc * D, g_k, p.row, (kb + 1) * kBc, T);
      LoadTile<kBc, D, kThreads>(s_v + (buf ^ 1) * kBc * D, g_v, p.row, (kb + 1) * kBc, T);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (kb == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        Ldmatrix4(q_frag[kk], s_q + Swz<D>(warp * 16 + ARow(lane), kk * 16 + ACol(lane)));
    }
    const int k0 = kb * kBc;
    if (k0 <= warp_row0 + 15) {  // else every key of the tile is above this warp's rows
      const bf16* k_tile = s_k + buf * kBc * D;
      const bf16* v_tile = s_v + buf * kBc * D;
      float s[kBc / 8][4];
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kBc / 16; ++np) {
          uint32_t r[4];
          Ldmatrix4(r, k_tile + Swz<D>(np * 16 + BnRow(lane), kk * 16 + BnCol(lane)));
          Mma(s[2 * np], q_frag[kk], r[0], r[1]);
          Mma(s[2 * np + 1], q_frag[kk], r[2], r[3]);
        }
      }
      const bool diagonal = k0 + kBc - 1 > warp_row0;
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[j][e] * p.scale_log2;
          if (diagonal && k0 + j * 8 + 2 * t + (e & 1) > (e < 2 ? row_a : row_b)) v = -INFINITY;
          s[j][e] = v;
          mx[e / 2] = fmaxf(mx[e / 2], v);
        }
      }
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        // Finite: key 0 is visible to every row, so the first tile sets a real max.
        corr[r] = exp2f(m[r] - mx[r]);
        m[r] = mx[r];
        l[r] *= corr[r];
      }
#pragma unroll
      for (int j = 0; j < kBc / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = exp2f(s[j][e] - m[e / 2]);
          s[j][e] = pe;
          l[e / 2] += pe;
        }
      }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= corr[0];
        o[i][1] *= corr[0];
        o[i][2] *= corr[1];
        o[i][3] *= corr[1];
      }
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk) {
        uint32_t a[4];
        CToA(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t r[4];
          Ldmatrix4Trans(r, v_tile + Swz<D>(kk * 16 + BtRow(lane), dp * 16 + BtCol(lane)));
          Mma(o[2 * dp], a, r[0], r[1]);
          Mma(o[2 * dp + 1], a, r[2], r[3]);
        }
      }
    }
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }

  // l is a per-thread partial sum over its columns: add the quad's four.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int64_t out_ld = static_cast<int64_t>(p.n_head) * D;
  bf16* out = p.out + static_cast<int64_t>(b) * T * out_ld + static_cast<int64_t>(h) * D;
  float* lse = p.lse + static_cast<int64_t>(bh) * T;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r == 0 ? row_a : row_b;
    if (row >= T) continue;
    const float inv = 1.f / l[r];
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + row * out_ld);
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      dst[(i * 8 + 2 * t) / 2] = PackBf16(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    if (t == 0) lse[row] = (m[r] + __log2f(l[r])) * kLn2;
  }
}

template <int D>
cudaError_t Launch(const AttentionShape& s, const void* qkv, void* out, float* lse,
                   cudaStream_t stream) {
  ForwardParams p;
  p.qkv = static_cast<const bf16*>(qkv);
  p.out = static_cast<bf16*>(out);
  p.lse = lse;
  p.row = s.row();
  p.seq = static_cast<int>(s.seq);
  p.n_head = static_cast<int>(s.n_head);
  p.n_kv_head = static_cast<int>(s.n_kv_head);
  p.scale_log2 = kLog2e / sqrtf(static_cast<float>(D));
  constexpr int kSmem = ForwardSmemBytes<D>();
  cudaError_t err = cudaFuncSetAttribute(FlashForwardKernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(s.batch * s.n_head),
                  static_cast<unsigned>((s.seq + kBr - 1) / kBr));
  FlashForwardKernel<D><<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFlashForward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                               cudaStream_t stream) {
  if (s.batch * s.seq == 0) return cudaSuccess;
  if (s.seq > (int64_t{1} << 30) || (s.seq + kBr - 1) / kBr > 65535 ||
      s.batch * s.n_head > 0x7fffffff)
    return cudaErrorInvalidValue;
  switch (s.head_dim) {
    case 64:
      return Launch<64>(s, qkv, out, lse, stream);
    case 128:
      return Launch<128>(s, qkv, out, lse, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds::kernels::attention::internal
