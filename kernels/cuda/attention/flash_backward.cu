// Causal attention backward, bf16 storage, tensor cores (FlashAttention-2 style).
//
// One block = one (b, kv head) and a block of kBc = 64 keys; 4 warps, warp w owns keys
// 16w..16w+15 and accumulates their dK, dV [16, D] in fp32 registers over every q head of
// the kv group and every query block at or after the diagonal, so no other block writes
// those rows of dqkv. Per query block of kBr = 64 rows (Q, dO, lse, D_i double-buffered
// in shared memory through cp.async), in the transposed orientation (keys as rows):
//   S^T  = K Q^T                         P^T = 2^(scale log2e S^T - lse log2e), 0 if key > query
//   dP^T = V dO^T                        dS^T = P^T (dP^T - D_i)
//   dV  += P^T dO                        dK  += dS^T Q         (P^T, dS^T from registers)
//   dQ   = dS K  over the block's keys: dS^T goes through shared memory, each warp then
//          computes 16 query rows and adds them to the fp32 accumulator dq_acc with
//          atomicAdd (blocks of other key ranges add to the same rows).
// scale is applied once: to dK at the end and to dq_acc when it is added into dqkv.
// After all blocks, FinishDq adds scale * dq_acc into dqkv's q part (bf16, accumulate).
// D_i = rowsum(dO * O) comes from LaunchRowDot; rows >= T read lse = +inf (P = 0).
//
// Shared memory: K, V [64, D], 2 x (Q, dO) [64, D] bf16, dS^T [64, 64] bf16, 2 x (lse, D_i)
// [64] fp32: 105 KiB at D = 128, 57 KiB at 64.
#include <algorithm>

#include "kernels/cuda/attention/attention_launch.h"
#include "kernels/cuda/attention/mma_util.cuh"

namespace ds::kernels::attention::internal {
namespace {

constexpr int kBr = 64;  // query rows per step
constexpr int kBc = 64;  // keys per block
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

struct BackwardParams {
  const bf16* qkv;
  const bf16* dout;
  const float* lse;     // [B, H, T]
  const float* d_rows;  // [B, H, T]
  float* dq_acc;        // [B, H, T, D]
  bf16* dqkv;
  int64_t row;  // elements per token of qkv
  int seq, n_head, n_kv_head;
  float scale, scale_log2;
};

template <int D>
constexpr int BackwardSmemBytes() {
  return (2 * kBc * D + 4 * kBr * D + kBc * kBr) * static_cast<int>(sizeof(bf16)) +
         4 * kBr * static_cast<int>(sizeof(float));
}

template <int D>
__global__ void __launch_bounds__(kThreads) FlashBackwardKernel(const BackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_k = reinterpret_cast<bf16*>(smem);
  bf16* s_v = s_k + kBc * D;
  bf16* s_q = s_v + kBc * D;                                  // [2][kBr][D]
  bf16* s_do = s_q + 2 * kBr * D;                             // [2][kBr][D]
  bf16* s_ds = s_do + 2 * kBr * D;                            // dS^T [kBc][kBr]
  float* s_lse = reinterpret_cast<float*>(s_ds + kBc * kBr);  // [2][kBr], log2 domain
  float* s_di = s_lse + 2 * kBr;                              // [2][kBr]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int kb = blockIdx.y;
  const int bkv = blockIdx.x, b = bkv / p.n_kv_head, kv = bkv % p.n_kv_head;
  const int group = p.n_head / p.n_kv_head;
  const int T = p.seq, k0 = kb * kBc;
  const int64_t out_ld = static_cast<int64_t>(p.n_head) * D;
  const bf16* base = p.qkv + static_cast<int64_t>(b) * T * p.row;
  const bf16* dout_b = p.dout + static_cast<int64_t>(b) * T * out_ld;

  LoadTile<kBc, D, kThreads>(s_k, base + static_cast<int64_t>(p.n_head + kv) * D, p.row, k0, T);
  LoadTile<kBc, D, kThreads>(s_v, base + static_cast<int64_t>(p.n_head + p.n_kv_head + kv) * D,
                             p.row, k0, T);

  const int qb_first = k0 / kBr;  // query blocks before it only see earlier keys
  const int n_qb = (T + kBr - 1) / kBr;
  const int per_head = n_qb - qb_first;
  const int n_iter = per_head * group;

  // Issues the loads of step `it` (head kv * group + it / per_head) into buffer `buf`.
  auto prefetch = [&](int it, int buf) {
    const int h = kv * group + it / per_head;
    const int q0 = (qb_first + it % per_head) * kBr;
    LoadTile<kBr, D, kThreads>(s_q + buf * kBr * D, base + static_cast<int64_t>(h) * D, p.row, q0,
                               T);
    LoadTile<kBr, D, kThreads>(s_do + buf * kBr * D, dout_b + static_cast<int64_t>(h) * D, out_ld,
                               q0, T);
    if (tid < kBr) {
      const int64_t i = (static_cast<int64_t>(b) * p.n_head + h) * T + q0 + tid;
      const bool valid = q0 + tid < T;
      s_lse[buf * kBr + tid] = valid ? p.lse[i] * kLog2e : INFINITY;
      s_di[buf * kBr + tid] = valid ? p.d_rows[i] : 0.f;
    }
  };
  prefetch(0, 0);
  CpAsyncCommit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
  const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    if (it + 1 < n_iter) {
      prefetch(it + 1, buf ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const int h = kv * group + it / per_head;
    const int q0 = (qb_first + it % per_head) * kBr;
    const bf16* q_tile = s_q + buf * kBr * D;
    const bf16* do_tile = s_do + buf * kBr * D;
    const float* lse2 = s_lse + buf * kBr;
    const float* di = s_di + buf * kBr;

    // S^T and dP^T for this warp's 16 keys x 64 queries.
    float st[kBr / 8][4], dpt[kBr / 8][4];
#pragma unroll
    for (int j = 0; j < kBr / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      Ldmatrix4(ak, s_k + Swz<D>(warp * 16 + ARow(lane), kk * 16 + ACol(lane)));
      Ldmatrix4(av, s_v + Swz<D>(warp * 16 + ARow(lane), kk * 16 + ACol(lane)));
#pragma unroll
      for (int np = 0; np < kBr / 16; ++np) {
        uint32_t r[4];
        Ldmatrix4(r, q_tile + Swz<D>(np * 16 + BnRow(lane), kk * 16 + BnCol(lane)));
        Mma(st[2 * np], ak, r[0], r[1]);
        Mma(st[2 * np + 1], ak, r[2], r[3]);
        Ldmatrix4(r, do_tile + Swz<D>(np * 16 + BnRow(lane), kk * 16 + BnCol(lane)));
        Mma(dpt[2 * np], av, r[0], r[1]);
        Mma(dpt[2 * np + 1], av, r[2], r[3]);
      }
    }
    // P^T into st, dS^T into dpt. Element (j, e): key (e < 2 ? key_a : key_b), query
    // q0 + 8j + 2t + (e & 1).
    const bool diagonal = k0 + warp * 16 + 15 > q0;
#pragma unroll
    for (int j = 0; j < kBr / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = j * 8 + 2 * t + (e & 1);
        float pe = exp2f(st[j][e] * p.scale_log2 - lse2[qi]);
        if (diagonal && (e < 2 ? key_a : key_b) > q0 + qi) pe = 0.f;
        st[j][e] = pe;
        dpt[j][e] = pe * (dpt[j][e] - di[qi]);
      }
    }
    // dV += P^T dO, dK += dS^T Q: A from registers (k = query), B = dO / Q tiles [query][d].
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk) {
      uint32_t ap[4], as[4];
      CToA(ap, st[2 * kk], st[2 * kk + 1]);
      CToA(as, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t r[4];
        Ldmatrix4Trans(r, do_tile + Swz<D>(kk * 16 + BtRow(lane), dp * 16 + BtCol(lane)));
        Mma(dv[2 * dp], ap, r[0], r[1]);
        Mma(dv[2 * dp + 1], ap, r[2], r[3]);
        Ldmatrix4Trans(r, q_tile + Swz<D>(kk * 16 + BtRow(lane), dp * 16 + BtCol(lane)));
        Mma(dk[2 * dp], as, r[0], r[1]);
        Mma(dk[2 * dp + 1], as, r[2], r[3]);
      }
    }
    // dS^T to shared memory, [key][query] (bf16, swizzled with kBr columns).
#pragma unroll
    for (int j = 0; j < kBr / 8; ++j) {
      const int col = j * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(s_ds + Swz<kBr>(warp * 16 + g, col)) =
          PackBf16(dpt[j][0], dpt[j][1]);
      *reinterpret_cast<uint32_t*>(s_ds + Swz<kBr>(warp * 16 + g + 8, col)) =
          PackBf16(dpt[j][2], dpt[j][3]);
    }
    __syncthreads();
    // dQ rows 16w..16w+15 of this query block = dS K over the block's 64 keys.
    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      uint32_t a[4];
      Ldmatrix4Trans(a, s_ds + Swz<kBr>(kk * 16 + AtRow(lane), warp * 16 + AtCol(lane)));
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t r[4];
        Ldmatrix4Trans(r, s_k + Swz<D>(kk * 16 + BtRow(lane), dp * 16 + BtCol(lane)));
        Mma(dq[2 * dp], a, r[0], r[1]);
        Mma(dq[2 * dp + 1], a, r[2], r[3]);
      }
    }
    const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
    float* acc = p.dq_acc + (static_cast<int64_t>(b) * p.n_head + h) * T * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = i * 8 + 2 * t;
      if (row_a < T) {
        atomicAdd(acc + static_cast<int64_t>(row_a) * D + col, dq[i][0]);
        atomicAdd(acc + static_cast<int64_t>(row_a) * D + col + 1, dq[i][1]);
      }
      if (row_b < T) {
        atomicAdd(acc + static_cast<int64_t>(row_b) * D + col, dq[i][2]);
        atomicAdd(acc + static_cast<int64_t>(row_b) * D + col + 1, dq[i][3]);
      }
    }
    // The next iteration's top barrier orders these s_ds reads before its writes.
  }

  // dqkv's k and v rows of this block: += scale dK, += dV (each row owned by this block).
  bf16* dbase = p.dqkv + static_cast<int64_t>(b) * T * p.row;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r == 0 ? key_a : key_b;
    if (key >= T) continue;
    __nv_bfloat162* dk_row = reinterpret_cast<__nv_bfloat162*>(
        dbase + key * p.row + static_cast<int64_t>(p.n_head + kv) * D);
    __nv_bfloat162* dv_row = reinterpret_cast<__nv_bfloat162*>(
        dbase + key * p.row + static_cast<int64_t>(p.n_head + p.n_kv_head + kv) * D);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int c2 = (i * 8 + 2 * t) / 2;
      const float2 k_old = __bfloat1622float2(dk_row[c2]);
      const float2 v_old = __bfloat1622float2(dv_row[c2]);
      dk_row[c2] = __floats2bfloat162_rn(k_old.x + p.scale * dk[i][2 * r],
                                         k_old.y + p.scale * dk[i][2 * r + 1]);
      dv_row[c2] = __floats2bfloat162_rn(v_old.x + dv[i][2 * r], v_old.y + dv[i][2 * r + 1]);
    }
  }
}

// dqkv[b, i, h D + d] += scale dq_acc[b, h, i, d]; one thread per bf16 pair.
__global__ void FinishDqKernel(const float* __restrict__ dq_acc, bf16* dqkv, int64_t row, int seq,
                               int n_head, int head_dim, float scale, int64_t pairs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    const int64_t e = 2 * i;  // element of dq_acc, [B, H, T, D]
    const int d = static_cast<int>(e % head_dim);
    const int64_t r = e / head_dim;  // (b h) T + t
    const int tok = static_cast<int>(r % seq);
    const int64_t bh = r / seq;
    const int h = static_cast<int>(bh % n_head);
    const int64_t b = bh / n_head;
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(dqkv + (b * seq + tok) * row +
                                                            static_cast<int64_t>(h) * head_dim + d);
    const float2 old = __bfloat1622float2(*dst);
    const float2 add = *reinterpret_cast<const float2*>(dq_acc + e);
    *dst = __floats2bfloat162_rn(old.x + scale * add.x, old.y + scale * add.y);
  }
}

template <int D>
cudaError_t Launch(const BackwardParams& p, int64_t batch, cudaStream_t stream) {
  constexpr int kSmem = BackwardSmemBytes<D>();
  cudaError_t err = cudaFuncSetAttribute(FlashBackwardKernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(batch * p.n_kv_head),
                  static_cast<unsigned>((p.seq + kBc - 1) / kBc));
  FlashBackwardKernel<D><<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFlashBackward(const AttentionShape& s, const void* qkv, const void* dout,
                                const float* lse, const float* d_rows, float* dq_acc, void* dqkv,
                                cudaStream_t stream) {
  if (s.batch * s.seq == 0) return cudaSuccess;
  if (s.seq > (int64_t{1} << 30) || (s.seq + kBc - 1) / kBc > 65535 ||
      s.batch * s.n_kv_head > 0x7fffffff || (s.head_dim != 64 && s.head_dim != 128))
    return cudaErrorInvalidValue;
  const size_t acc_bytes =
      static_cast<size_t>(s.batch * s.n_head * s.seq * s.head_dim) * sizeof(float);
  cudaError_t err = cudaMemsetAsync(dq_acc, 0, acc_bytes, stream);
  if (err != cudaSuccess) return err;
  BackwardParams p;
  p.qkv = static_cast<const bf16*>(qkv);
  p.dout = static_cast<const bf16*>(dout);
  p.lse = lse;
  p.d_rows = d_rows;
  p.dq_acc = dq_acc;
  p.dqkv = static_cast<bf16*>(dqkv);
  p.row = s.row();
  p.seq = static_cast<int>(s.seq);
  p.n_head = static_cast<int>(s.n_head);
  p.n_kv_head = static_cast<int>(s.n_kv_head);
  p.scale = 1.f / sqrtf(static_cast<float>(s.head_dim));
  p.scale_log2 = p.scale * kLog2e;
  err = s.head_dim == 64 ? Launch<64>(p, s.batch, stream) : Launch<128>(p, s.batch, stream);
  if (err != cudaSuccess) return err;
  const int64_t pairs = s.batch * s.n_head * s.seq * s.head_dim / 2;
  const int64_t blocks = std::min<int64_t>((pairs + 255) / 256, 65536);
  FinishDqKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      dq_acc, p.dqkv, p.row, p.seq, p.n_head, static_cast<int>(s.head_dim), p.scale, pairs);
  return cudaGetLastError();
}

}  // namespace ds::kernels::attention::internal
