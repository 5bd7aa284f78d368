// kv_attention (definition: kernels/ops/kv_attention.cc): the new tokens' keys and values are
// written into the caches at slots [start, start + S), then, as attention's forward does
// (kernels/cpu/attention.cc), for each (b, h) and block of up to kBlock new queries:
// S = scale Q K^T over the block's slots [lo, start + i0 + rows) of the cache (sgemm), each
// row masked to its slots [min(pad_b, p), p] (p = start + i: causal, pad keys out; a pad
// query with no real key before it attends itself, so nothing is empty), a row softmax, and
// O = P V (sgemm), O /= the row sums. Tasks (b, h, block) run on the OpenMP threads, sgemm
// single-threaded inside; decode (S = 1) is one GEMV-like sgemm per (b, h). The options of
// kernels/attention_options.h as attention applies them: the scale, a window (slot p reads
// slots above p - window: the real tokens' slots are consecutive positions), the soft cap.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/attention_options.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;

struct Geometry {
  HeadLayout l;
  int64_t tmax = 0, start = 0, blocks = 0;
  const int32_t* pad = nullptr;
  float scale = 1.f;
  AttentionOptions options;  // window, softcap (kernels/attention_options.h)
};

Status MakeGeometry(const OpArgs& args, Geometry* g) {
  static const Attrs kEmpty;
  DS_RETURN_IF_ERROR(
      InferHeadLayout("kv_attention", args.attrs ? *args.attrs : kEmpty, args.in[0].spec(), &g->l));
  const HeadLayout& l = g->l;
  g->tmax = args.in[1].dim(2);
  g->start = args.in[3].i32()[0];
  g->pad = args.in[4].i32();
  g->blocks = (l.seq + kBlock - 1) / kBlock;
  DS_RETURN_IF_ERROR(ReadAttentionOptions("kv_attention", args.attrs ? *args.attrs : kEmpty,
                                          l.head_dim, &g->options));
  g->scale = g->options.scale;
  if (g->start < 0 || g->start + l.seq > g->tmax)
    return InvalidArgumentError("kv_attention: new tokens at slots [" + std::to_string(g->start) +
                                ", " + std::to_string(g->start + l.seq) + ") of a cache of " +
                                std::to_string(g->tmax));
  for (int64_t b = 0; b < l.batch; ++b)
    if (g->pad[b] < 0 || g->pad[b] >= g->start + l.seq)
      return InvalidArgumentError("kv_attention: sequence " + std::to_string(b) + " has " +
                                  std::to_string(g->pad[b]) + " pad slots of " +
                                  std::to_string(g->start + l.seq));
  return OkStatus();
}

// The new tokens' k and v heads into the caches [B, Hkv, Tmax, D].
void WriteCache(const Geometry& g, const float* qkv, float* kc, float* vc) {
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, row = l.row();
  ParallelFor(l.batch * l.seq, kElementwiseGrain / std::max<int64_t>(row, 1) + 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const int64_t b = r / l.seq, slot = g.start + r % l.seq;
                  for (int64_t h = 0; h < l.n_kv_head; ++h) {
                    const int64_t at = ((b * l.n_kv_head + h) * g.tmax + slot) * d;
                    std::memcpy(kc + at, qkv + r * row + l.k_offset(h), d * sizeof(float));
                    std::memcpy(vc + at, qkv + r * row + l.v_offset(h), d * sizeof(float));
                  }
                }
              });
}

// Query block qb of (b, h).
void Block(const Geometry& g, const float* qkv, const float* kc, const float* vc, float* out,
           int64_t b, int64_t h, int64_t qb) {
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, row = l.row(), out_ld = l.n_head * d, i0 = qb * kBlock;
  const int64_t rows = std::min(kBlock, l.seq - i0);
  const int64_t lo = g.options.FirstKey(g.start + i0, std::min<int64_t>(g.pad[b], g.start + i0));
  const int64_t keys = g.start + i0 + rows - lo;
  const int64_t kv = h / (l.n_head / l.n_kv_head);
  const float* k = kc + ((b * l.n_kv_head + kv) * g.tmax + lo) * d;
  const float* v = vc + ((b * l.n_kv_head + kv) * g.tmax + lo) * d;
  float* s = ThreadScratch(0, kBlock * keys);  // [rows, keys]
  Sgemm(false, true, rows, keys, d, g.scale, qkv + (b * l.seq + i0) * row + l.q_offset(h), row, k,
        d, 0.f, s, keys);
  float inv_sum[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * keys;
    const int64_t p = g.start + i0 + r;
    const int64_t first = g.options.FirstKey(p, std::min<int64_t>(g.pad[b], p)) - lo;
    const int64_t n = p - lo + 1 - first;
    if (g.options.softcap > 0)
      for (int64_t j = first; j < first + n; ++j)
        sr[j] = g.options.softcap * std::tanh(sr[j] / g.options.softcap);
    const float m = MaxArray(sr + first, n);
    inv_sum[r] = 1.f / ExpShiftSum(sr + first, sr + first, n, m);
    std::fill(sr, sr + first, 0.f);
    std::fill(sr + first + n, sr + keys, 0.f);
  }
  float* o = out + (b * l.seq + i0) * out_ld + h * d;
  Sgemm(false, false, rows, d, keys, 1.f, s, keys, v, d, 0.f, o, out_ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) o[r * out_ld + j] *= inv_sum[r];
}

Status Forward(const OpArgs& args) {
  Geometry g;
  DS_RETURN_IF_ERROR(MakeGeometry(args, &g));
  const float* qkv = args.in[0].f32();
  float* kc = const_cast<float*>(args.in[1].f32());  // state, written in place
  float* vc = const_cast<float*>(args.in[2].f32());
  WriteCache(g, qkv, kc, vc);
  float* out = args.out[0].f32();
  const int64_t heads = g.l.batch * g.l.n_head, tasks = heads * g.blocks;
  BlasSingleThreadScope single_thread_blas;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t qb = g.blocks - 1 - t / heads, bh = t % heads;
    Block(g, qkv, kc, vc, out, bh / g.l.n_head, bh % g.l.n_head, qb);
  }
  return OkStatus();
}

Status NoBackward(const OpArgs&) {
  return UnimplementedError("kv_attention is forward only (generation)");
}

const bool kRegistered =
    RegisterKernel("kv_attention", Device::kCpu, DType::kF32, {Forward, NoBackward});

}  // namespace
}  // namespace ds::kernels::cpu
