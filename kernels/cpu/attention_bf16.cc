#include "kernels/cpu/attention_bf16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <utility>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/batched_gemm.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

// How the blocks meet the keys, chosen once per process from oneDNN's instruction set:
//   causal (every CPU but AMX): a block of 64 query rows [i0, i0 + 64) multiplies only the keys
//     [0, i0 + 64) it can see, a prefix of each head's keys. At L4 C256 T 256 (kernel_bench
//     --matmul bf16, avx512_core_bf16, best of 40) forward 1.12 -> 0.85 ms, backward 3.25 ->
//     2.60 ms against whole keys in blocks of 128; at T 1024 backward 63 -> 33-38 ms.
//   whole keys (AMX): oneDNN 2.6's AMX kernels take a B operand only whole, and a prefix of each
//     head's keys is not, so every block of 128 rows multiplies all T keys (past the diagonal P
//     is 0): at T 256 that is 1.6x the causal products at several times the rate; 128 rows ran
//     68.6-69.9 ms a step against 70.9-71.8 with 64 (alternating builds), 256 no better.
struct Blocking {
  int64_t rows;
  bool causal;
};

std::atomic<int> g_keys{-1};  // a Bf16AttentionKeys forced by SetBf16AttentionKeys, or -1

Blocking BlockingHere() {
  static const bool amx = OneDnnIsa().find("amx") != std::string::npos;
  const int forced = g_keys.load();
  const bool whole = forced < 0 ? amx : forced == static_cast<int>(Bf16AttentionKeys::kWhole);
  return whole ? Blocking{128, false} : Blocking{64, true};
}

struct Dims {
  int64_t b, t, h, hkv, g, d, row, out_ld;
  int64_t block;  // query rows per block (BlockingHere)
  bool causal;    // a block multiplies only the keys it sees
};

Dims DimsOf(const Bf16AttentionShape& s) {
  const Blocking blocking = BlockingHere();
  const int64_t row = (s.heads + 2 * s.kv_heads) * s.head_dim;
  return {s.batch,
          s.seq,
          s.heads,
          s.kv_heads,
          s.heads / s.kv_heads,
          s.head_dim,
          row,
          s.heads * s.head_dim,
          blocking.rows,
          blocking.causal};
}

// Rows of a packed buffer as batches [B, Hkv, G]: the kv heads of [B, Hkv, T, D] (rows [.., +
// rows), broadcast over their group), or one block's query heads [B, H, rows, D] (kv = false):
// oneDNN's AMX kernels take an A operand only dense, so queries (and dO) are packed block by block.
MatrixView Heads(const Dims& z, bool kv, int64_t rows) {
  const int64_t per = (kv ? z.t : rows) * z.d;
  MatrixView v;
  v.batch[0] = z.b;
  v.batch[1] = z.hkv;
  v.batch[2] = kv ? 1 : z.g;
  v.batch_stride[0] = (kv ? z.hkv : z.h) * per;
  v.batch_stride[1] = (kv ? 1 : z.g) * per;
  v.batch_stride[2] = per;
  v.rows = rows;
  v.cols = z.d;
  v.row_stride = z.d;
  return v;
}

MatrixView Transposed(MatrixView v) {
  std::swap(v.rows, v.cols);
  std::swap(v.row_stride, v.col_stride);
  return v;
}

// A block's scores-shaped buffer [B, H, m, keys] (dense) as batches [B, Hkv, G].
MatrixView Scores(const Dims& z, int64_t m, int64_t keys) {
  MatrixView v;
  v.batch[0] = z.b;
  v.batch[1] = z.hkv;
  v.batch[2] = z.g;
  v.batch_stride[0] = z.h * m * keys;
  v.batch_stride[1] = z.g * m * keys;
  v.batch_stride[2] = m * keys;
  v.rows = m;
  v.cols = keys;
  v.row_stride = keys;
  return v;
}

// One query head of each group (the scores or the packed queries of head g of every group):
// batches [B, Hkv, 1], for dK and dV, which sum over the group.
MatrixView Member(MatrixView v) {
  v.batch[2] = 1;
  return v;
}

// Rows [i0, i0 + rows) of a token-major tensor [B, T, ld] whose head k's D columns start at
// col0 + k D: the query heads ([B, Hkv, G] batches) or the kv heads ([B, Hkv, 1]).
MatrixView TokenMajor(const Dims& z, int64_t ld, bool kv, int64_t rows) {
  MatrixView v;
  v.batch[0] = z.b;
  v.batch[1] = z.hkv;
  v.batch[2] = kv ? 1 : z.g;
  v.batch_stride[0] = z.t * ld;
  v.batch_stride[1] = (kv ? 1 : z.g) * z.d;
  v.batch_stride[2] = z.d;
  v.rows = rows;
  v.cols = z.d;
  v.row_stride = ld;
  return v;
}

struct Packed {
  uint16_t *q, *k, *v, *dout;
  uint16_t *qt, *doutt;  // backward: Q and dO transposed per block, [B, H, D, m]
};

// Where token t of head h sits in a block-major packed buffer: block t / block holds [B, H, m, D].
int64_t BlockMajor(const Dims& z, int64_t b, int64_t h, int64_t t) {
  const int64_t i0 = t / z.block * z.block, m = std::min(z.block, z.t - i0);
  return z.b * z.h * i0 * z.d + ((b * z.h + h) * m + (t - i0)) * z.d;
}

// K, V of qkv in bf16 head-major [B, Hkv, T, D]; Q (and dO of dout) block-major.
// d values of qkv (fp32 or bf16) from element at, in bf16.
void PackRun(const Tensor& qkv, int64_t at, int64_t d, uint16_t* dst) {
  if (IsBf16(qkv))
    std::copy_n(Bf16Data(qkv) + at, d, dst);
  else
    RoundToBf16Run(qkv.f32() + at, dst, d);
}

Packed Pack(const Dims& z, const Tensor& qkv, const float* dout) {
  const int64_t q = z.b * z.h * z.t * z.d, kv = z.b * z.hkv * z.t * z.d;
  uint16_t* base =
      reinterpret_cast<uint16_t*>(ThreadScratch(0, static_cast<size_t>(4 * q + 2 * kv) / 2 + 1));
  Packed p;
  p.q = base;
  p.k = p.q + q;
  p.v = p.k + kv;
  p.dout = p.v + kv;
  p.qt = p.dout + q;
  p.doutt = p.qt + q;
  ParallelFor(z.b * z.t, std::max<int64_t>(1, kElementwiseGrain / z.row),
              [&](int64_t lo, int64_t hi) {
                for (int64_t bt = lo; bt < hi; ++bt) {
                  const int64_t b = bt / z.t, t = bt % z.t;
                  const int64_t src = bt * z.row;
                  for (int64_t h = 0; h < z.h; ++h) {
                    const int64_t at = BlockMajor(z, b, h, t);
                    PackRun(qkv, src + h * z.d, z.d, p.q + at);
                    if (dout) RoundToBf16Run(dout + bt * z.out_ld + h * z.d, p.dout + at, z.d);
                  }
                  for (int64_t h = 0; h < z.hkv; ++h) {
                    const int64_t at = ((b * z.hkv + h) * z.t + t) * z.d;
                    PackRun(qkv, src + (z.h + h) * z.d, z.d, p.k + at);
                    PackRun(qkv, src + (z.h + z.hkv + h) * z.d, z.d, p.v + at);
                  }
                }
              });
  return p;
}

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

// Causal softmax of one block's scores s [B H m, keys] (row x is query i0 + x % m): P = exp(S -
// lse) in bf16, 0 past the diagonal; lse computed here (forward) or given (backward, where dp
// becomes dS = P (dP - D) in bf16).
struct Block {
  int64_t i0, m, keys;
};

void SoftmaxForward(const Dims& z, const Block& k, float* s, uint16_t* p, float* lse) {
  ParallelFor(z.b * z.h * k.m, std::max<int64_t>(1, kElementwiseGrain / k.keys),
              [&](int64_t lo, int64_t hi) {
                for (int64_t x = lo; x < hi; ++x) {
                  const int64_t bh = x / k.m, i = k.i0 + x % k.m, n = i + 1;
                  float* sr = s + x * k.keys;
                  const float mx = MaxArray(sr, n);
                  const float sum = ExpShiftSum(sr, sr, n, mx), inv = 1.f / sum;
                  for (int64_t j = 0; j < n; ++j) sr[j] *= inv;
                  RoundToBf16Run(sr, p + x * k.keys, n);
                  std::fill(p + x * k.keys + n, p + (x + 1) * k.keys, uint16_t{0});
                  lse[bh * z.t + i] = mx + std::log(sum);
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

// A block's query rows and the keys its products run over: those it sees (causal), or all T
// (past the diagonal P is 0).
Block BlockOf(const Dims& z, int64_t qb) {
  const int64_t i0 = qb * z.block, m = std::min(z.block, z.t - i0);
  return {i0, m, z.causal ? i0 + m : z.t};
}

int64_t Blocks(const Dims& z) { return (z.t + z.block - 1) / z.block; }

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

// A block's per-head rows [B, H, m, D] (dense fp32, a product's output) written (or added) into
// a token-major tensor [B, T, ld] at the heads' columns from col0: out, or dqkv's queries.
void ScatterRows(const Dims& z, const Block& k, const float* rows, const Tensor& dst, int64_t ld,
                 int64_t col0, bool add) {
  ParallelFor(z.b * k.m, std::max<int64_t>(1, kElementwiseGrain / (z.h * z.d)),
              [&](int64_t lo, int64_t hi) {
                for (int64_t x = lo; x < hi; ++x) {
                  const int64_t b = x / k.m, r = x % k.m;
                  const int64_t to = (b * z.t + k.i0 + r) * ld + col0;
                  for (int64_t h = 0; h < z.h; ++h) {
                    const float* from = rows + ((b * z.h + h) * k.m + r) * z.d;
                    if (IsBf16(dst)) {  // a bf16 out, rounded once
                      RoundToBf16Run(from, static_cast<uint16_t*>(dst.data()) + to + h * z.d, z.d);
                      continue;
                    }
                    float* t = dst.f32() + to + h * z.d;
                    if (add) {
#pragma omp simd
                      for (int64_t e = 0; e < z.d; ++e) t[e] += from[e];
                    } else {
                      std::copy(from, from + z.d, t);
                    }
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

// The query block's offset in a block-major buffer, and group member g's within it.
int64_t QueryBlock(const Dims& z, const Block& k) { return z.b * z.h * k.i0 * z.d; }

}  // namespace

void SetBf16AttentionKeys(Bf16AttentionKeys keys) { g_keys.store(static_cast<int>(keys)); }

Status PrepareBf16Attention(const Bf16AttentionShape& s, bool backward) {
  const Dims z = DimsOf(s);
  for (int64_t qb = 0; qb < Blocks(z); ++qb) {
    const Block k = BlockOf(z, qb);
    const MatrixView sc = Scores(z, k.m, k.keys), q = Heads(z, false, k.m);
    const MatrixView kt = Transposed(Heads(z, true, k.keys)), kv = Heads(z, true, k.keys);
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(q, kt, sc, s.scale, 0.f));  // S
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(sc, kv, q, 1.f, 0.f));      // O = P V
    if (!backward) continue;
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(q, kt, sc, 1.f, 0.f));      // dP = dO V^T
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(sc, kv, q, s.scale, 0.f));  // dQ = scale dS K
    const MatrixView qt = TransposedMember(z, k), sums = TransposedSums(z, k.keys);
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(qt, Member(sc), sums, s.scale, 1.f));  // dK^T
    DS_RETURN_IF_ERROR(PrepareBatchedGemmBf16(qt, Member(sc), sums, 1.f, 1.f));      // dV^T
  }
  return OkStatus();
}

void Bf16AttentionForward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          float* lse) {
  const Dims z = DimsOf(s);
  const Packed pk = Pack(z, qkv, nullptr);
  const int64_t cap = z.b * z.h * z.block * z.t;
  float* sbuf = ThreadScratch(1, static_cast<size_t>(cap + z.b * z.h * z.block * z.d));
  float* rows = sbuf + cap;  // a block's O [B, H, m, D]
  uint16_t* p = reinterpret_cast<uint16_t*>(ThreadScratch(2, static_cast<size_t>(cap) / 2 + 1));
  for (int64_t qb = 0; qb < Blocks(z); ++qb) {
    const Block k = BlockOf(z, qb);
    const MatrixView sc = Scores(z, k.m, k.keys), q = Heads(z, false, k.m);
    BatchedGemmBf16(q, pk.q + QueryBlock(z, k), Transposed(Heads(z, true, k.keys)), pk.k, sc, sbuf,
                    s.scale, 0.f);
    SoftmaxForward(z, k, sbuf, p, lse);
    BatchedGemmBf16(sc, p, Heads(z, true, k.keys), pk.v, q, rows, 1.f, 0.f);
    ScatterRows(z, k, rows, out, z.out_ld, 0, false);
  }
}

void Bf16AttentionBackward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                           const float* dout, const float* lse, float* dqkv) {
  const Dims z = DimsOf(s);
  const Packed pk = Pack(z, qkv, dout);
  PackTransposed(z, qkv, z.row, 0, pk.qt);
  PackTransposed(z, Tensor(const_cast<float*>(dout), {z.b * z.t * z.out_ld}, DType::kF32), z.out_ld,
                 0, pk.doutt);
  const int64_t sums = z.b * z.hkv * z.d * z.t;
  float* dot = ThreadScratch(3, static_cast<size_t>(z.b * z.h * z.t + 2 * sums));
  float* dkt = dot + z.b * z.h * z.t;  // dK^T, dV^T [B, Hkv, D, T], summed over the blocks
  float* dvt = dkt + sums;
  std::fill(dkt, dkt + 2 * sums, 0.f);
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
    const MatrixView qt = TransposedMember(z, k), all = TransposedSums(z, k.keys);
    for (int64_t g = 0; g < z.g; ++g) {  // dK, dV sum over the group's query heads
      const int64_t sg = g * k.m * k.keys, tg = q0 + g * z.d * k.m;
      BatchedGemmBf16(qt, pk.qt + tg, Member(sc), ds + sg, all, dkt, s.scale, 1.f);
      BatchedGemmBf16(qt, pk.doutt + tg, Member(sc), p + sg, all, dvt, 1.f, 1.f);
    }
  }
  AddTransposed(z, dkt, z.h * z.d, dqkv);
  AddTransposed(z, dvt, (z.h + z.hkv) * z.d, dqkv);
}

}  // namespace ds::kernels::cpu
