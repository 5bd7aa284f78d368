// attention's bf16 backward (attention_bf16.h): per query block, S and dP again, dS, dQ; then dK
// and dV summed over the blocks and added into dqkv once:
//   causal blocking: dK = scale dS^T Q and dV = P^T dO, products of a transposed A view, into
//     head-major [B, Hkv, T, D] sums, added row by row. At L4 C256 T 256 (kernel_bench --matmul
//     bf16, avx512_core_bf16, 4 alternating runs of 60) backward 3.93-4.15 -> 3.14-3.55 ms (median)
//     against the transposed form below, which also packs Q^T and dO^T.
//   whole keys (AMX, whose kernels take an A operand only dense): dK^T = scale Q^T dS and dV^T =
//     dO^T P from Q and dO packed transposed per block, into [B, Hkv, D, T] sums, added back
//     transposed through 16-row tiles.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/attention_bf16_blocks.h"
#include "kernels/cpu/attention_fused_bf16.h"
#include "kernels/cpu/batched_gemm.h"
#include "kernels/cpu/cpu_util.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace attention_bf16 {
namespace {

// Each query block's rows of src (token-major [B, T, ld], the heads' columns from col0) in bf16,
// transposed per head: [B, H, D, m] at the block's offset (the A operand of dK^T = Q^T dS).
// Through 16-row tiles, so the reads stay rows and the writes runs of 16.
void PackTransposed(const Dims& z, const Tensor& src, int64_t ld, int64_t col0, uint16_t* dst) {
  constexpr int64_t kTile = 16;
  const int64_t blocks = (z.t + z.block - 1) / z.block;
  ParallelFor(z.b * z.h * blocks, 1, [&](int64_t lo, int64_t hi) {
    float tile[kTile * 256];  // D <= 256 (UseBf16)
    uint16_t run[kTile];
    for (int64_t x = lo; x < hi; ++x) {
      const int64_t qb = x % blocks, bh = x / blocks, b = bh / z.h, h = bh % z.h;
      const int64_t i0 = qb * z.block, m = std::min(z.block, z.t - i0);
      uint16_t* out = dst + z.b * z.h * i0 * z.d + bh * z.d * m;
      for (int64_t r0 = 0; r0 < m; r0 += kTile) {
        const int64_t n = std::min(kTile, m - r0);
        for (int64_t r = 0; r < n; ++r) {
          const int64_t at = (b * z.t + i0 + r0 + r) * ld + col0 + h * z.d;
          if (IsBf16(src))
            WidenBf16Run(Bf16Data(src) + at, tile + r * z.d, z.d);
          else
            std::copy_n(src.f32() + at, z.d, tile + r * z.d);
        }
        for (int64_t e = 0; e < z.d; ++e) {
          for (int64_t r = 0; r < n; ++r) run[r] = FloatToBf16(tile[r * z.d + e]);
          std::copy_n(run, n, out + e * m + r0);
        }
      }
    }
  });
}

// dqkv's K or V columns (from col0) += the transposed per-kv-head sums acc [B, Hkv, D, T].
void AddTransposed(const Dims& z, const float* acc, int64_t col0, float* dqkv) {
  constexpr int64_t kTile = 16;
  ParallelFor(z.b * z.hkv * ((z.t + kTile - 1) / kTile), 1, [&](int64_t lo, int64_t hi) {
    const int64_t tiles = (z.t + kTile - 1) / kTile;
    for (int64_t x = lo; x < hi; ++x) {
      const int64_t bh = x / tiles, t0 = x % tiles * kTile, b = bh / z.hkv, h = bh % z.hkv;
      const int64_t n = std::min(kTile, z.t - t0);
      const float* a = acc + bh * z.d * z.t + t0;
      for (int64_t r = 0; r < n; ++r) {
        float* to = dqkv + (b * z.t + t0 + r) * z.row + col0 + h * z.d;
        for (int64_t e = 0; e < z.d; ++e) to[e] += a[e * z.t + r];
      }
    }
  });
}

void SoftmaxBackward(const Dims& z, const Block& k, float* s, float* dp, const float* lse,
                     const float* dot, uint16_t* p, uint16_t* ds) {
  ParallelFor(z.b * z.h * k.m, std::max<int64_t>(1, kElementwiseGrain / k.keys),
              [&](int64_t lo, int64_t hi) {
                for (int64_t x = lo; x < hi; ++x) {
                  const int64_t bh = x / k.m, i = k.i0 + x % k.m, n = i + 1;
                  float* sr = s + x * k.keys;
                  float* dr = dp + x * k.keys;
                  ExpShiftSum(sr, sr, n, lse[bh * z.t + i]);
                  const float d = dot[bh * z.t + i];
                  for (int64_t j = 0; j < n; ++j) dr[j] = sr[j] * (dr[j] - d);
                  RoundToBf16Run(sr, p + x * k.keys, n);
                  RoundToBf16Run(dr, ds + x * k.keys, n);
                  std::fill(p + x * k.keys + n, p + (x + 1) * k.keys, uint16_t{0});
                  std::fill(ds + x * k.keys + n, ds + (x + 1) * k.keys, uint16_t{0});
                }
              });
}

// D[b, h, i] = sum over the head's D columns of dO O at token i.
void RowDots(const Dims& z, const Tensor& out, const float* dout, float* dot) {
  ParallelFor(z.b * z.t, std::max<int64_t>(1, kElementwiseGrain / z.out_ld),
              [&](int64_t lo, int64_t hi) {
                for (int64_t bt = lo; bt < hi; ++bt) {
                  const int64_t b = bt / z.t, t = bt % z.t;
                  float wide[256];  // D <= 256 (UseBf16)
                  for (int64_t h = 0; h < z.h; ++h) {
                    const float* o = ActRead(out, bt * z.out_ld + h * z.d, z.d, wide);
                    const float* g = dout + bt * z.out_ld + h * z.d;
                    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
                    for (int64_t j = 0; j < z.d; ++j) acc += o[j] * g[j];
                    dot[(b * z.h + h) * z.t + t] = acc;
                  }
                }
              });
}

// One block's transposed queries (or dO) of group member g: [B, Hkv, 1] batches of [D, m].
MatrixView TransposedMember(const Dims& z, const Block& k) {
  MatrixView v;
  v.batch[0] = z.b;
  v.batch[1] = z.hkv;
  v.batch_stride[0] = z.h * z.d * k.m;
  v.batch_stride[1] = z.g * z.d * k.m;
  v.batch_stride[2] = z.d * k.m;
  v.rows = z.d;
  v.cols = k.m;
  v.row_stride = k.m;
  return v;
}

// The transposed dK or dV sums over all blocks, [B, Hkv, 1] batches of [D, T]: the first `keys`
// columns, those a block adds into.
MatrixView TransposedSums(const Dims& z, int64_t keys) {
  MatrixView v;
  v.batch[0] = z.b;
  v.batch[1] = z.hkv;
  v.batch_stride[0] = z.hkv * z.d * z.t;
  v.batch_stride[1] = z.d * z.t;
  v.batch_stride[2] = z.d * z.t;
  v.rows = z.d;
  v.cols = keys;
  v.row_stride = z.t;
  return v;
}

// dqkv's K or V columns (from col0) += the head-major sums acc [B, Hkv, T, D].
void AddHeadMajor(const Dims& z, const float* acc, int64_t col0, float* dqkv) {
  ParallelFor(z.b * z.t, std::max<int64_t>(1, kElementwiseGrain / (z.hkv * z.d)),
              [&](int64_t lo, int64_t hi) {
                for (int64_t bt = lo; bt < hi; ++bt) {
                  const int64_t b = bt / z.t, t = bt % z.t;
                  for (int64_t h = 0; h < z.hkv; ++h) {
                    const float* a = acc + ((b * z.hkv + h) * z.t + t) * z.d;
                    float* to = dqkv + bt * z.row + col0 + h * z.d;
#pragma omp simd
                    for (int64_t e = 0; e < z.d; ++e) to[e] += a[e];
                  }
                }
              });
}

// The views of block k's dK and dV products (a, c) and their B operand's (b): A, B of member g at
// offsets the caller adds.
struct KvViews {
  MatrixView a, b, c;
};

KvViews KvGradViews(const Dims& z, const Block& k) {
  const MatrixView sc = Scores(z, k.m, k.keys);
  if (z.causal)  // dS^T [keys, m] (P^T) times the member's Q [m, D] (dO): [keys, D] head-major
    return {Transposed(Member(sc)), Member(Heads(z, false, k.m)), Heads(z, true, k.keys)};
  return {TransposedMember(z, k), Member(sc), TransposedSums(z, k.keys)};  // Q^T dS: [D, keys]
}

// Where backward keeps dK and dV while the blocks add into them (zeroed), and Q^T, dO^T for the
// transposed form.
struct KvSums {
  float *dk, *dv;
};

KvSums StartKvSums(const Dims& z, const Tensor& qkv, const float* dout, const Packed& pk,
                   float* at) {
  const int64_t sums = z.b * z.hkv * z.d * z.t;
  std::fill(at, at + 2 * sums, 0.f);
  if (!z.causal) {
    PackTransposed(z, qkv, z.row, 0, pk.qt);
    PackTransposed(z, Tensor(const_cast<float*>(dout), {z.b * z.t * z.out_ld}, DType::kF32),
                   z.out_ld, 0, pk.doutt);
  }
  return {at, at + sums};
}

// Block k's part of dK and dV, from its dS and P (each [B, H, m, keys]).
void AddKvGrads(const Dims& z, const Block& k, const Packed& pk, const uint16_t* ds,
                const uint16_t* p, float scale, const KvSums& sums) {
  const KvViews v = KvGradViews(z, k);
  const int64_t q0 = QueryBlock(z, k);
  for (int64_t g = 0; g < z.g; ++g) {  // dK, dV sum over the group's query heads
    const int64_t sg = g * k.m * k.keys;
    if (z.causal) {
      const int64_t qg = q0 + g * k.m * z.d;
      BatchedGemmBf16(v.a, ds + sg, v.b, pk.q + qg, v.c, sums.dk, scale, 1.f);
      BatchedGemmBf16(v.a, p + sg, v.b, pk.dout + qg, v.c, sums.dv, 1.f, 1.f);
    } else {
      const int64_t tg = q0 + g * z.d * k.m;
      BatchedGemmBf16(v.a, pk.qt + tg, v.b, ds + sg, v.c, sums.dk, scale, 1.f);
      BatchedGemmBf16(v.a, pk.doutt + tg, v.b, p + sg, v.c, sums.dv, 1.f, 1.f);
    }
  }
}

void FinishKvGrads(const Dims& z, const KvSums& sums, float* dqkv) {
  const int64_t k0 = z.h * z.d, v0 = (z.h + z.hkv) * z.d;
  if (z.causal) {
    AddHeadMajor(z, sums.dk, k0, dqkv);
    AddHeadMajor(z, sums.dv, v0, dqkv);
  } else {
    AddTransposed(z, sums.dk, k0, dqkv);
    AddTransposed(z, sums.dv, v0, dqkv);
  }
}

}  // namespace

Status PrepareKvGradProducts(const Dims& z, const Block& k, float scale) {
  const KvViews v = KvGradViews(z, k);
  DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(v.a, v.b, v.c, scale, 1.f));  // dK (dK^T)
  return PrepareBatchedGemmBf16(v.a, v.b, v.c, 1.f, 1.f);                 // dV (dV^T)
}

}  // namespace attention_bf16

void Bf16AttentionBackward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                           const float* dout, const float* lse, float* dqkv) {
  using namespace attention_bf16;  // NOLINT: the path's own internals
  if (Bf16AttentionPathFor(s) == Bf16AttentionPath::kFused)
    return FusedBf16AttentionBackward(s, qkv, out, dout, lse, dqkv);
  const Dims z = DimsOf(s);
  const Packed pk = Pack(z, qkv, dout);
  const int64_t sums = z.b * z.hkv * z.d * z.t;
  float* dot = ThreadScratch(3, static_cast<size_t>(z.b * z.h * z.t + 2 * sums));
  const KvSums kv = StartKvSums(z, qkv, dout, pk, dot + z.b * z.h * z.t);
  RowDots(z, out, dout, dot);
  const int64_t cap = z.b * z.h * z.block * z.t;
  float* sbuf = ThreadScratch(1, static_cast<size_t>(2 * cap + z.b * z.h * z.block * z.d));
  float* dp = sbuf + cap;
  float* rows = dp + cap;  // a block's dQ [B, H, m, D]
  uint16_t* p = reinterpret_cast<uint16_t*>(ThreadScratch(2, static_cast<size_t>(cap) + 1));
  uint16_t* ds = p + cap;
  for (int64_t qb = 0; qb < Blocks(z); ++qb) {
    const Block k = BlockOf(z, qb);
    const MatrixView sc = Scores(z, k.m, k.keys), q = Heads(z, false, k.m);
    const MatrixView kt = Transposed(Heads(z, true, k.keys));
    const int64_t q0 = QueryBlock(z, k);
    BatchedGemmBf16(q, pk.q + q0, kt, pk.k, sc, sbuf, s.scale, 0.f);
    BatchedGemmBf16(q, pk.dout + q0, kt, pk.v, sc, dp, 1.f, 0.f);
    SoftmaxBackward(z, k, sbuf, dp, lse, dot, p, ds);
    BatchedGemmBf16(sc, ds, Heads(z, true, k.keys), pk.k, q, rows, s.scale, 0.f);
    ScatterRows(z, k, rows, Tensor(dqkv, {z.b * z.t * z.row}, DType::kF32), z.row, 0, true);
    AddKvGrads(z, k, pk, ds, p, s.scale, kv);
  }
  FinishKvGrads(z, kv, dqkv);
}

}  // namespace ds::kernels::cpu
