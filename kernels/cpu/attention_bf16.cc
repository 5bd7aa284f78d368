#include "kernels/cpu/attention_bf16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <utility>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/attention_bf16_blocks.h"
#include "kernels/cpu/attention_fused_bf16.h"
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
// The causal blocking also forms backward's dK and dV directly (attention_bf16_backward.cc).
struct Blocking {
  int64_t rows;
  bool causal;
};

std::atomic<int> g_path{-1};  // a Bf16AttentionPath forced by SetBf16AttentionPath, or -1

bool Amx() {
  static const bool amx = OneDnnIsa().find("amx") != std::string::npos;
  return amx;
}

Blocking BlockingHere() {
  const int forced = g_path.load();
  const bool whole = forced < 0 ? Amx() : forced == static_cast<int>(Bf16AttentionPath::kWhole);
  return whole ? Blocking{128, false} : Blocking{64, true};
}

}  // namespace

namespace attention_bf16 {

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

MatrixView Member(MatrixView v) {
  v.batch[2] = 1;
  return v;
}

namespace {

// Where token t of head h sits in a block-major packed buffer: block t / block holds [B, H, m, D].
int64_t BlockMajor(const Dims& z, int64_t b, int64_t h, int64_t t) {
  const int64_t i0 = t / z.block * z.block, m = std::min(z.block, z.t - i0);
  return z.b * z.h * i0 * z.d + ((b * z.h + h) * m + (t - i0)) * z.d;
}

// d values of qkv (fp32 or bf16) from element at, in bf16.
void PackRun(const Tensor& qkv, int64_t at, int64_t d, uint16_t* dst) {
  if (IsBf16(qkv))
    std::copy_n(Bf16Data(qkv) + at, d, dst);
  else
    RoundToBf16Run(qkv.f32() + at, dst, d);
}

// Causal softmax of one block's scores s [B H m, keys] (row x is query i0 + x % m): P = exp(S -
// lse) in bf16, 0 past the diagonal, and lse.
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

}  // namespace

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

// A block's query rows and the keys its products run over: those it sees (causal), or all T
// (past the diagonal P is 0).
Block BlockOf(const Dims& z, int64_t qb) {
  const int64_t i0 = qb * z.block, m = std::min(z.block, z.t - i0);
  return {i0, m, z.causal ? i0 + m : z.t};
}

int64_t Blocks(const Dims& z) { return (z.t + z.block - 1) / z.block; }

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

int64_t QueryBlock(const Dims& z, const Block& k) { return z.b * z.h * k.i0 * z.d; }

}  // namespace attention_bf16

void SetBf16AttentionPath(Bf16AttentionPath path) { g_path.store(static_cast<int>(path)); }

Bf16AttentionPath Bf16AttentionPathFor(const Bf16AttentionShape& s) {
  const int forced = g_path.load();
  if (forced == static_cast<int>(Bf16AttentionPath::kWhole) || (forced < 0 && Amx()))
    return Bf16AttentionPath::kWhole;
  if (forced == static_cast<int>(Bf16AttentionPath::kCausal) || !FusedBf16AttentionFits(s))
    return Bf16AttentionPath::kCausal;
  return Bf16AttentionPath::kFused;
}

Status PrepareBf16Attention(const Bf16AttentionShape& s, bool backward) {
  using namespace attention_bf16;  // NOLINT: the path's own internals
  if (Bf16AttentionPathFor(s) == Bf16AttentionPath::kFused) return OkStatus();  // nothing to make
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
    DS_RETURN_IF_ERROR(PrepareKvGradProducts(z, k, s.scale));
  }
  return OkStatus();
}

void Bf16AttentionForward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          float* lse) {
  using namespace attention_bf16;  // NOLINT: the path's own internals
  if (Bf16AttentionPathFor(s) == Bf16AttentionPath::kFused)
    return FusedBf16AttentionForward(s, qkv, out, lse);
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

}  // namespace ds::kernels::cpu
