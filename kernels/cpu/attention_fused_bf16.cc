// attention's fused bf16 path (attention_bf16.h, Bf16AttentionPath::kFused): on a CPU with
// AVX512_BF16 and no AMX, each thread takes whole heads and runs all of a head's work in its
// cache: K and V packed once into the pair layout VDPBF16PS reads (bf16_pair_gemm.h), then per
// block of 32 query rows, against the keys that block sees (a multiple of 16):
//   forward:  S = scale Q K^T (fp32), P = softmax(S) rounded to bf16, O = P V, lse;
//   backward: S again, P = exp(S - lse), dP = dO V^T, dS = P (dP - rowsum(dO O)),
//             dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO, each added into dqkv by the
//             product itself (a thread owns its heads' columns).
// The arithmetic is the batched path's (attention_bf16.cc): bf16 products with fp32
// accumulation, the softmax in fp32 (exp_simd's exponential; sums in 16 lanes here), P
// normalized before it is rounded. What changes is the cost: the batched path packs every head for
// oneDNN, writes each block's products to memory and runs 7 primitives a block; here nothing leaves
// L2 but the inputs and outputs. Backward parallelizes over kv heads (a group's query heads add
// into one dK, dV).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/attention_fused_bf16.h"
#include "kernels/cpu/attention_fused_rows.h"
#include "kernels/cpu/bf16_pair_gemm.h"
#include "kernels/cpu/cpu_util.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

constexpr int64_t kRows = 32;  // query rows per block (a multiple of 16: the key counts are)

struct Geo {
  int64_t b, t, tp, h, hkv, g, d, row, out_ld;
  float scale;
};

Geo GeoOf(const Bf16AttentionShape& s) {
  const int64_t row = (s.heads + 2 * s.kv_heads) * s.head_dim;
  return {s.batch,    s.seq,      (s.seq + kRows - 1) / kRows * kRows,
          s.heads,    s.kv_heads, s.heads / s.kv_heads,
          s.head_dim, row,        s.heads * s.head_dim,
          s.scale};
}

// Carves a thread's scratch into the buffers a head needs, in 32-bit words.
class Carve {
 public:
  explicit Carve(uint32_t* at) : at_(at) {}
  uint32_t* Words(int64_t n) {
    uint32_t* p = at_;
    at_ += (n + 15) / 16 * 16;  // 64-byte steps
    return p;
  }
  float* Floats(int64_t n) { return reinterpret_cast<float*>(Words(n)); }
  uint16_t* Halves(int64_t n) { return reinterpret_cast<uint16_t*>(Words((n + 1) / 2)); }

 private:
  uint32_t* at_;
};

uint32_t* Scratch(int64_t words) {
  return reinterpret_cast<uint32_t*>(ThreadScratch(0, static_cast<size_t>(words)));
}

// Head columns [col, col + d) of the T rows of batch b of a token-major tensor (row stride ld)
// as bf16 rows: a bf16 tensor's own (no copy), an fp32 one's rounded into buf [T, d].
struct Plain {
  const uint16_t* p;
  int64_t ld;
};

Plain HeadRows(const Geo& z, const Tensor& src, int64_t ld, int64_t b, int64_t col, uint16_t* buf) {
  const int64_t at = b * z.t * ld + col;
  if (IsBf16(src)) return {Bf16Data(src) + at, ld};
  for (int64_t t = 0; t < z.t; ++t) RoundToBf16Run(src.f32() + at + t * ld, buf + t * z.d, z.d);
  return {buf, z.d};
}

PairRows Rows(const uint16_t* x, int64_t ld, int64_t r0) {  // plain bf16 rows as A
  return {reinterpret_cast<const uint32_t*>(x + r0 * ld), ld / 2, 1};
}

// Keys block rows [i0, i0 + m) multiply: those they see, rounded up to a multiple of 16.
int64_t KeysOf(int64_t i0, int64_t m) { return (i0 + m + 15) / 16 * 16; }

// Forward's softmax of one block: s [m, nk] scaled scores -> p bf16 [m, nk] (0 past each row's
// diagonal), lse of the rows.
void SoftmaxRows(int64_t i0, int64_t m, int64_t nk, float* s, uint16_t* p, float* lse) {
  for (int64_t r = 0; r < m; ++r)
    lse[i0 + r] = fused_rows::SoftmaxRow(s + r * nk, i0 + r + 1, nk, p + r * nk);
}

void ForwardHead(const Geo& z, const Tensor& qkv, const Tensor& out, int64_t b, int64_t h,
                 float* lse) {
  const int64_t kvh = h / z.g;
  Carve c(Scratch(z.t * z.d + z.tp * z.d + 2 * kRows * z.tp + kRows * z.d + 256));
  uint16_t* qbuf = c.Halves(z.t * z.d);
  uint16_t* kvbuf = c.Halves(z.t * z.d);  // K, then V, from an fp32 qkv
  uint32_t* kt = c.Words(z.d / 2 * z.tp);
  uint32_t* vv = c.Words(z.tp / 2 * z.d);
  float* s = c.Floats(kRows * z.tp);
  uint16_t* p = c.Halves(kRows * z.tp);
  float* o = c.Floats(kRows * z.d);
  const Plain q = HeadRows(z, qkv, z.row, b, h * z.d, qbuf);
  const Plain k = HeadRows(z, qkv, z.row, b, (z.h + kvh) * z.d, kvbuf);
  PackPairColumns(k.p, k.ld, z.t, z.d, z.tp, kt);
  const Plain v = HeadRows(z, qkv, z.row, b, (z.h + z.hkv + kvh) * z.d, kvbuf);
  PackRowPairs(v.p, v.ld, z.t, z.d, z.tp, vv);
  float* head_lse = lse + (b * z.h + h) * z.t;
  for (int64_t i0 = 0; i0 < z.t; i0 += kRows) {
    const int64_t m = std::min(kRows, z.t - i0), nk = KeysOf(i0, m);
    Bf16PairGemm(m, nk, z.d / 2, Rows(q.p, q.ld, i0), kt, z.tp, s, nk, z.scale, false);
    SoftmaxRows(i0, m, nk, s, p, head_lse);
    Bf16PairGemm(m, z.d, nk / 2, Rows(p, nk, 0), vv, z.d, o, z.d, 1.f, false);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t at = (b * z.t + i0 + r) * z.out_ld + h * z.d;
      if (IsBf16(out))
        RoundToBf16Run(o + r * z.d, static_cast<uint16_t*>(out.data()) + at, z.d);
      else
        std::copy_n(o + r * z.d, z.d, out.f32() + at);
    }
  }
}

// What backward keeps per kv head (K, V packed) and per query head.
struct BackwardBuffers {
  uint32_t *kt, *kv, *vt;        // K^T and V^T as B of S and dP; K as B of dQ
  uint16_t *qbuf, *dout;         // bf16 rows [T, d]: Q from an fp32 qkv (K and V before), dO
  Plain q;                       // the query head's rows
  uint32_t *qv, *doutv;          // as B of dK and dV
  float* dot;                    // rowsum(dO O) [T]
  float *s, *dp;                 // a block's S -> P, dP -> dS [kRows, tp]
  uint16_t* ds;                  // dS plain bf16 [kRows, tp]
  uint32_t *ds_pairs, *p_pairs;  // dS, P by row pairs [kRows / 2, tp]
};

BackwardBuffers BackwardScratch(const Geo& z) {
  const int64_t per = z.tp * z.d;
  Carve c(
      Scratch(5 * per / 2 + per + z.t + 2 * kRows * z.tp + kRows * z.tp / 2 + kRows * z.tp + 512));
  BackwardBuffers w;
  w.kt = c.Words(per / 2);
  w.kv = c.Words(per / 2);
  w.vt = c.Words(per / 2);
  w.qbuf = c.Halves(per);
  w.dout = c.Halves(per);
  w.qv = c.Words(per / 2);
  w.doutv = c.Words(per / 2);
  w.dot = c.Floats(z.t);
  w.s = c.Floats(kRows * z.tp);
  w.dp = c.Floats(kRows * z.tp);
  w.ds = c.Halves(kRows * z.tp);
  w.ds_pairs = c.Words(kRows / 2 * z.tp);
  w.p_pairs = c.Words(kRows / 2 * z.tp);
  return w;
}

// Backward's softmax of one block, row pair by row pair: P and dS (0 past each row's diagonal)
// into their bf16 layouts.
void SoftmaxGradRows(const BackwardBuffers& w, int64_t i0, int64_t m, int64_t nk,
                     const float* lse) {
  for (int64_t r = 0; r < m; r += 2) {
    fused_rows::GradRow row[2];
    for (int64_t x = 0; x < 2 && r + x < m; ++x)
      row[x] = {w.s + (r + x) * nk, w.dp + (r + x) * nk, i0 + r + x + 1,
                lse[i0 + r + x],    w.dot[i0 + r + x],   w.ds + (r + x) * nk};
    fused_rows::SoftmaxGradRowPair(row[0], r + 1 < m ? &row[1] : nullptr, nk,
                                   w.p_pairs + r / 2 * nk, w.ds_pairs + r / 2 * nk);
  }
}

// rowsum(dO O) over query head h's columns, for each of the T rows of batch b.
void RowDots(const Geo& z, const Tensor& out, const float* dout, int64_t b, int64_t h, float* dot) {
  for (int64_t t = 0; t < z.t; ++t) {
    const int64_t at = (b * z.t + t) * z.out_ld + h * z.d;
    if (IsBf16(out)) {
      dot[t] = fused_rows::DotBf16(Bf16Data(out) + at, dout + at, z.d);
      continue;
    }
    const float* o = out.f32() + at;
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int64_t e = 0; e < z.d; ++e) acc += o[e] * dout[at + e];
    dot[t] = acc;
  }
}

// One query block of query head h against its kv head's packed K, V: its dQ and its parts of dK
// and dV added into dqkv.
void BackwardBlock(const Geo& z, const BackwardBuffers& w, const float* lse, int64_t b, int64_t h,
                   int64_t i0, float* dqkv) {
  const int64_t m = std::min(kRows, z.t - i0), nk = KeysOf(i0, m), pairs = (m + 1) / 2;
  Bf16PairGemm(m, nk, z.d / 2, Rows(w.q.p, w.q.ld, i0), w.kt, z.tp, w.s, nk, z.scale, false);
  Bf16PairGemm(m, nk, z.d / 2, Rows(w.dout, z.d, i0), w.vt, z.tp, w.dp, nk, 1.f, false);
  SoftmaxGradRows(w, i0, m, nk, lse);
  // dQ, dK, dV added into dqkv where they belong: this thread owns the kv head's columns and its
  // query heads' (dK and dV rows past T are 0: keys past T are masked, so they are left out).
  float* dq = dqkv + (b * z.t + i0) * z.row + h * z.d;
  Bf16PairGemm(m, z.d, nk / 2, Rows(w.ds, nk, 0), w.kv, z.d, dq, z.row, z.scale, true);
  const int64_t q0 = i0 / 2 * z.d, keys = std::min(nk, z.t);  // i0 even: the first row pair
  float* dk = dqkv + b * z.t * z.row + (z.h + h / z.g) * z.d;
  float* dv = dk + z.hkv * z.d;
  Bf16PairGemm(keys, z.d, pairs, {w.ds_pairs, 1, nk}, w.qv + q0, z.d, dk, z.row, z.scale, true);
  Bf16PairGemm(keys, z.d, pairs, {w.p_pairs, 1, nk}, w.doutv + q0, z.d, dv, z.row, 1.f, true);
}

void BackwardKvHead(const Geo& z, const Tensor& qkv, const Tensor& out, const float* dout,
                    const float* lse, int64_t b, int64_t kvh, float* dqkv) {
  BackwardBuffers w = BackwardScratch(z);
  const Plain k = HeadRows(z, qkv, z.row, b, (z.h + kvh) * z.d, w.qbuf);
  PackPairColumns(k.p, k.ld, z.t, z.d, z.tp, w.kt);
  PackRowPairs(k.p, k.ld, z.t, z.d, z.tp, w.kv);
  const Plain v = HeadRows(z, qkv, z.row, b, (z.h + z.hkv + kvh) * z.d, w.qbuf);
  PackPairColumns(v.p, v.ld, z.t, z.d, z.tp, w.vt);
  const Tensor dout_t(const_cast<float*>(dout), {z.b * z.t * z.out_ld}, DType::kF32);
  for (int64_t h = kvh * z.g; h < (kvh + 1) * z.g; ++h) {
    w.q = HeadRows(z, qkv, z.row, b, h * z.d, w.qbuf);
    PackRowPairs(w.q.p, w.q.ld, z.t, z.d, z.tp, w.qv);
    HeadRows(z, dout_t, z.out_ld, b, h * z.d, w.dout);  // fp32: rounded into w.dout
    PackRowPairs(w.dout, z.d, z.t, z.d, z.tp, w.doutv);
    RowDots(z, out, dout, b, h, w.dot);
    const float* head_lse = lse + (b * z.h + h) * z.t;
    for (int64_t i0 = 0; i0 < z.t; i0 += kRows) BackwardBlock(z, w, head_lse, b, h, i0, dqkv);
  }
}

}  // namespace

bool FusedBf16AttentionFits(const Bf16AttentionShape& s) {
  return Bf16PairGemmHere() && s.head_dim % 16 == 0 && s.head_dim <= 256;
}

void FusedBf16AttentionForward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                               float* lse) {
  const Geo z = GeoOf(s);
  ParallelFor(z.b * z.h, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t x = lo; x < hi; ++x) ForwardHead(z, qkv, out, x / z.h, x % z.h, lse);
  });
}

void FusedBf16AttentionBackward(const Bf16AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                const float* dout, const float* lse, float* dqkv) {
  const Geo z = GeoOf(s);
  ParallelFor(z.b * z.hkv, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t x = lo; x < hi; ++x)
      BackwardKvHead(z, qkv, out, dout, lse, x / z.hkv, x % z.hkv, dqkv);
  });
}

}  // namespace ds::kernels::cpu
