// attention: causal self-attention on packed qkv [B, T, (H + 2 Hkv) D] (q heads, then k
// heads, then v heads) -> out [B, T, H D]; attrs n_head, n_kv_head (grouped-query: q head h
// reads kv head h / (H / Hkv)). scale = 1 / sqrt(D).
//
// Blocked like FlashAttention, but with BLAS: for one (b, h) and a block of up to kBlock
// query rows [i0, i0 + rows), the only keys that matter are [0, i0 + rows), so the block's
// scores S = scale Q K^T fit a [kBlock, T] per-thread scratch; no [B, H, T, T] tensor is
// ever formed. Q, K, V and the gradients are strided views into the packed tensors
// (leading dimension = qkv row), so nothing is copied.
//   forward:  S = scale Q K^T (sgemm), causal mask, row softmax (P unnormalized, m, l),
//             O = P V (sgemm) then O /= l;  saved lse = m + log l  [B, H, T].
//   backward: recompute P = exp(S - lse); dP = dO V^T; D_i = rowsum(dO * O);
//             dS = P (dP - D); dQ += scale dS K; dK += scale dS^T Q; dV += P^T dO.
// Threads: forward runs (b, h, query block) tasks, largest first. Backward runs
// (b, kv head, part) tasks: a task owns dK/dV of its kv head, so the q heads of a group and
// all their query blocks run in one task; when B Hkv is too small to feed the threads, the
// query blocks are dealt round-robin to `parts` tasks that sum dK/dV into private buffers,
// added in part order afterwards. sgemm runs single-threaded inside (BlasSingleThreadScope).
// Backward reads qkv, out and lse.
// The options of kernels/attention_options.h: scale replaces 1 / sqrt(D); a window starts each
// block's scores at its first row's first key (k0) and masks each row below its own; softcap
// caps the scores before the softmax, and backward multiplies dS by the cap's derivative.
// Left padding (an optional second input pad int32 [B], RLHF's batches of prompts of several
// lengths): in sequence b the first pad[b] tokens are padding; a real token's query (i >=
// pad[b]) reads keys [pad[b], i] only, a pad token's keys [0, i] (pads only), so a real token
// computes exactly what it would without the padding and nothing is ever empty.
// bf16 step (OpArgs::matmul kBF16) on a CPU with native bf16 products, plain causal attention
// (no pads, documents, window or cap): attention_bf16.h's path, the products in bf16 batched over
// the heads, the same inputs, outputs and saved lse. qkv and out may be bf16 activations
// (Kernel::bf16_act_inputs / outputs); the fp32 path works on widened copies of them.
// Packed documents (the second input int32 [B, T] instead: Megatron's reset_attention_mask):
// query (b, i) reads keys [start[b, i], i], where start is the first token of its document
// (0 <= start[b, i] <= i, non-decreasing along a row); each block's scores then begin at its
// first row's first key, as with a window.
#include <algorithm>
#include <cmath>

#include <vector>

#include "kernels/attention_options.h"
#include "kernels/cpu/act_io.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

// Query rows per block: 32 was measurably slower (shallower GEMMs), 128 and 256 no faster
// at T=1024 and slower at T=256 (more of the diagonal block is masked work).
constexpr int64_t kBlock = 64;

struct Geometry {
  HeadLayout l;
  int64_t row = 0;     // floats per token in qkv
  int64_t out_ld = 0;  // floats per token in out (H D)
  int64_t blocks = 0;  // query blocks per sequence
  float scale = 1.f;
  AttentionOptions options;        // window, softcap (kernels/attention_options.h)
  const int32_t* pad = nullptr;    // left pads per sequence, or none
  const int32_t* start = nullptr;  // each token's document start [B, T], or none
  // The first key query row i of sequence b reads: after its pads or in its document, within
  // the window.
  int64_t FirstKey(int64_t b, int64_t i) const {
    if (start) return options.FirstKey(i, start[b * l.seq + i]);
    return options.FirstKey(i, pad && i >= pad[b] ? pad[b] : 0);
  }
  // The first key a block from query row i0 computes scores for: 0 without a window or
  // documents (the GEMM's shape as it always was), else the block's first row's first key.
  int64_t BlockStart(int64_t b, int64_t i0) const {
    return options.window > 0 || start ? FirstKey(b, i0) : 0;
  }
};

// Gemma 2's soft cap on the scores [lo, n) of one row: s = cap tanh(s / cap).
void SoftCap(float cap, float* s, int64_t lo, int64_t n) {
  for (int64_t j = lo; j < n; ++j) s[j] = cap * std::tanh(s[j] / cap);
}

// Document starts int32 [B, T]: each within [0, i] and non-decreasing along its row.
Status ReadStarts(const Tensor& starts, Geometry* g) {
  const int64_t t = g->l.seq;
  if (starts.dtype() != DType::kI32 || starts.shape() != Shape{g->l.batch, t})
    return InvalidArgumentError("attention: document starts must be int32 [" +
                                std::to_string(g->l.batch) + ", " + std::to_string(t) + "], got " +
                                ShapeToString(starts.shape()));
  g->start = starts.i32();
  for (int64_t b = 0; b < g->l.batch; ++b)
    for (int64_t i = 0; i < t; ++i) {
      const int32_t v = g->start[b * t + i];
      if (v < 0 || v > i || (i > 0 && v < g->start[b * t + i - 1]))
        return InvalidArgumentError("attention: token " + std::to_string(i) + " of sequence " +
                                    std::to_string(b) + " has document start " + std::to_string(v) +
                                    " (starts lie in [0, i] and never decrease)");
    }
  return OkStatus();
}

Status MakeGeometry(const OpArgs& args, Geometry* g) {
  static const Attrs kEmpty;
  DS_RETURN_IF_ERROR(
      InferHeadLayout("attention", args.attrs ? *args.attrs : kEmpty, args.in[0].spec(), &g->l));
  g->row = g->l.row();
  g->out_ld = g->l.n_head * g->l.head_dim;
  g->blocks = (g->l.seq + kBlock - 1) / kBlock;
  DS_RETURN_IF_ERROR(ReadAttentionOptions("attention", args.attrs ? *args.attrs : kEmpty,
                                          g->l.head_dim, &g->options));
  g->scale = g->options.scale;
  if (args.in.size() > 1 && args.in[1].shape().size() == 2) return ReadStarts(args.in[1], g);
  if (args.in.size() > 1) {
    const Tensor& pad = args.in[1];
    if (pad.dtype() != DType::kI32 || pad.numel() != g->l.batch)
      return InvalidArgumentError("attention: pad must be int32 [" + std::to_string(g->l.batch) +
                                  "], got " + ShapeToString(pad.shape()));
    g->pad = pad.i32();
    for (int64_t b = 0; b < g->l.batch; ++b)
      if (g->pad[b] < 0 || g->pad[b] >= g->l.seq)
        return InvalidArgumentError("attention: sequence " + std::to_string(b) + " has " +
                                    std::to_string(g->pad[b]) + " pads of " +
                                    std::to_string(g->l.seq) + " positions");
  }
  return OkStatus();
}

// A bf16 step on a CPU that multiplies bf16 natively takes attention_bf16.h's path for plain
// causal attention (no pads, documents, window or cap): its products in bf16, batched over heads.
bool UseBf16(const OpArgs& args, const Geometry& g) {
  static const bool native = HasNativeBf16Gemm();
  return args.matmul == DType::kBF16 && native && !g.pad && !g.start && g.options.window <= 0 &&
         g.options.softcap <= 0;
}

Bf16AttentionShape Bf16Shape(const Geometry& g) {
  return {g.l.batch, g.l.seq, g.l.n_head, g.l.n_kv_head, g.l.head_dim, g.scale};
}

// A bf16 activation (qkv, out) as the fp32 path reads it: widened into the calling thread's
// buffer `slot`, or the tensor's own floats.
float* WideCopy(const Tensor& t, int slot, bool fill) {
  if (!IsBf16(t)) return t.f32();
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[slot];
  b.resize(static_cast<size_t>(t.numel()));
  if (fill) ConvertBf16ToF32(Bf16Data(t), b.data(), t.numel());
  return b.data();
}

// Forward of query block qb of (b, h): writes out rows and lse.
void ForwardBlock(const Geometry& g, const float* qkv, float* out, float* lse, int64_t b, int64_t h,
                  int64_t qb) {
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, i0 = qb * kBlock;
  const int64_t rows = std::min(kBlock, l.seq - i0), k0 = g.BlockStart(b, i0);
  const int64_t keys = i0 + rows - k0;  // the block's keys [k0, i0 + rows)
  const int64_t kv = h / (l.n_head / l.n_kv_head);
  const float* base = qkv + b * l.seq * g.row;
  float* s = ThreadScratch(0, kBlock * l.seq);  // [rows, keys], ld = keys
  Sgemm(false, true, rows, keys, d, g.scale, base + i0 * g.row + l.q_offset(h), g.row,
        base + (k0 * g.row) + l.k_offset(kv), g.row, 0.f, s, keys);
  float inv_sum[kBlock];
  float* lse_row = lse + (b * l.n_head + h) * l.seq + i0;
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * keys;
    const int64_t n = i0 + r + 1 - k0, lo = g.FirstKey(b, i0 + r) - k0;  // keys [lo, n)
    if (g.options.softcap > 0) SoftCap(g.options.softcap, sr, lo, n);
    const float m = MaxArray(sr + lo, n - lo);
    const float sum = ExpShiftSum(sr + lo, sr + lo, n - lo, m);
    std::fill(sr, sr + lo, 0.f);
    std::fill(sr + n, sr + keys, 0.f);
    inv_sum[r] = 1.f / sum;
    lse_row[r] = m + std::log(sum);
  }
  float* o = out + (b * l.seq + i0) * g.out_ld + h * d;
  Sgemm(false, false, rows, d, keys, 1.f, s, keys, base + k0 * g.row + l.v_offset(kv), g.row, 0.f,
        o, g.out_ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j) o[r * g.out_ld + j] *= inv_sum[r];
}

Status Forward(const OpArgs& args) {
  Geometry g;
  DS_RETURN_IF_ERROR(MakeGeometry(args, &g));
  float* lse = args.saved[0].f32();
  if (UseBf16(args, g)) {
    Bf16AttentionForward(Bf16Shape(g), args.in[0], args.out[0], lse);
    return OkStatus();
  }
  const float* qkv = WideCopy(args.in[0], 0, true);
  float* out = WideCopy(args.out[0], 1, false);
  const int64_t heads = g.l.batch * g.l.n_head, tasks = heads * g.blocks;
  BlasSingleThreadScope single_thread_blas;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t qb = g.blocks - 1 - t / heads;  // the longest key ranges first
    const int64_t bh = t % heads;
    ForwardBlock(g, qkv, out, lse, bh / g.l.n_head, bh % g.l.n_head, qb);
  }
  if (IsBf16(args.out[0]))
    ConvertF32ToBf16(out, static_cast<uint16_t*>(args.out[0].data()), args.out[0].numel());
  return OkStatus();
}

// Pointers for one backward task; dk/dv may point into a private buffer (ld kv_ld).
struct BackwardTask {
  const float* qkv;   // sequence b of qkv
  const float* out;   // sequence b of out
  const float* dout;  // sequence b of dout
  const float* lse;   // lse rows of sequence b, head 0
  float* dqkv;        // sequence b of dqkv
  float* dk;          // dK of kv head g, row 0
  float* dv;
  int64_t kv_ld;
};

// Backward of query block qb of head h (in kv group kv) of sequence b into task's gradients.
void BackwardBlock(const Geometry& g, const BackwardTask& t, int64_t b, int64_t h, int64_t kv,
                   int64_t qb) {
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, i0 = qb * kBlock;
  const int64_t rows = std::min(kBlock, l.seq - i0), k0 = g.BlockStart(b, i0);
  const int64_t keys = i0 + rows - k0;  // the block's keys [k0, i0 + rows)
  const float* q = t.qkv + i0 * g.row + l.q_offset(h);
  const float* k = t.qkv + k0 * g.row + l.k_offset(kv);
  const float* v = t.qkv + k0 * g.row + l.v_offset(kv);
  const float* o = t.out + i0 * g.out_ld + h * d;
  const float* dout = t.dout + i0 * g.out_ld + h * d;
  const float* lse = t.lse + h * l.seq + i0;
  float* p = ThreadScratch(0, kBlock * l.seq);   // P   [rows, keys]
  float* ds = ThreadScratch(1, kBlock * l.seq);  // dS  [rows, keys]
  Sgemm(false, true, rows, keys, d, g.scale, q, g.row, k, g.row, 0.f, p, keys);
  Sgemm(false, true, rows, keys, d, 1.f, dout, g.out_ld, v, g.row, 0.f, ds, keys);
  const float cap = g.options.softcap;
  float* capped = cap > 0 ? ThreadScratch(3, keys) : nullptr;  // one row's capped scores
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = i0 + r + 1 - k0, lo = g.FirstKey(b, i0 + r) - k0;
    float* pr = p + r * keys;
    float* dsr = ds + r * keys;
    if (cap > 0) {
      SoftCap(cap, pr, lo, n);
      std::copy(pr + lo, pr + n, capped + lo);
    }
    ExpShiftSum(pr + lo, pr + lo, n - lo, lse[r]);
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < d; ++j) dot += dout[r * g.out_ld + j] * o[r * g.out_ld + j];
    for (int64_t j = lo; j < n; ++j) dsr[j] = pr[j] * (dsr[j] - dot);
    if (cap > 0)  // through the cap: d(cap tanh(s / cap)) / ds = 1 - tanh^2
      for (int64_t j = lo; j < n; ++j) dsr[j] *= 1.f - (capped[j] / cap) * (capped[j] / cap);
    std::fill(pr, pr + lo, 0.f);
    std::fill(dsr, dsr + lo, 0.f);
    std::fill(pr + n, pr + keys, 0.f);
    std::fill(dsr + n, dsr + keys, 0.f);
  }
  float* dq = t.dqkv + i0 * g.row + l.q_offset(h);
  Sgemm(false, false, rows, d, keys, g.scale, ds, keys, k, g.row, 1.f, dq, g.row);
  Sgemm(true, false, keys, d, rows, g.scale, ds, keys, q, g.row, 1.f, t.dk + k0 * t.kv_ld, t.kv_ld);
  Sgemm(true, false, keys, d, rows, 1.f, p, keys, dout, g.out_ld, 1.f, t.dv + k0 * t.kv_ld,
        t.kv_ld);
}

// Tasks per kv head: 1 when the B Hkv heads give every thread >= 4 tasks; otherwise the
// query blocks are split across up to `blocks` tasks with private dK/dV.
int64_t BackwardParts(const Geometry& g, int64_t groups) {
  const int threads = PlannedThreads(groups * g.blocks, 1);
  if (threads == 1) return 1;
  return std::min<int64_t>(g.blocks, std::max<int64_t>(1, (4 * threads - 1) / groups + 1));
}

// dK/dV in dqkv += the private per-part sums [groups, parts, T, 2D], in part order.
void AddPrivateKV(const Geometry& g, const float* priv, int64_t parts, float* dqkv) {
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, priv_ld = 2 * d, groups = l.batch * l.n_kv_head;
#pragma omp parallel for schedule(static)
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t b = gi / l.n_kv_head, kv = gi % l.n_kv_head;
    for (int64_t part = 0; part < parts; ++part) {
      const float* src = priv + (gi * parts + part) * l.seq * priv_ld;
      for (int64_t i = 0; i < l.seq; ++i) {
        float* dk = dqkv + (b * l.seq + i) * g.row + l.k_offset(kv);
        float* dv = dqkv + (b * l.seq + i) * g.row + l.v_offset(kv);
        for (int64_t j = 0; j < d; ++j) {
          dk[j] += src[i * priv_ld + j];
          dv[j] += src[i * priv_ld + d + j];
        }
      }
    }
  }
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  Geometry g;
  DS_RETURN_IF_ERROR(MakeGeometry(args, &g));
  if (UseBf16(args, g)) {
    Bf16AttentionBackward(Bf16Shape(g), args.in[0], args.out[0], args.grad_out[0].f32(),
                          args.saved[0].f32(), args.grad_in[0].f32());
    return OkStatus();
  }
  const HeadLayout& l = g.l;
  const int64_t d = l.head_dim, group = l.n_head / l.n_kv_head;
  const int64_t groups = l.batch * l.n_kv_head;
  const int64_t parts = BackwardParts(g, groups);
  // Private dK/dV when parts > 1: [groups, parts, T, 2D] (dK then dV in each row).
  const int64_t priv_ld = 2 * d, priv_task = l.seq * priv_ld;
  float* priv = nullptr;
  if (parts > 1) {
    priv = ThreadScratch(2, groups * parts * priv_task);
    std::fill(priv, priv + groups * parts * priv_task, 0.f);
  }
  float* dqkv = args.grad_in[0].f32();
  const float* qkv = WideCopy(args.in[0], 0, true);
  const float* out = WideCopy(args.out[0], 1, true);
  const int64_t seq_stride = l.seq * g.row, out_stride = l.seq * g.out_ld;
  BlasSingleThreadScope single_thread_blas;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < groups * parts; ++task) {
    const int64_t gi = task / parts, part = task % parts;
    const int64_t b = gi / l.n_kv_head, kv = gi % l.n_kv_head;
    BackwardTask t;
    t.qkv = qkv + b * seq_stride;
    t.out = out + b * out_stride;
    t.dout = args.grad_out[0].f32() + b * out_stride;
    t.lse = args.saved[0].f32() + b * l.n_head * l.seq;
    t.dqkv = dqkv + b * seq_stride;
    if (parts > 1) {
      t.dk = priv + task * priv_task;
      t.dv = t.dk + d;
      t.kv_ld = priv_ld;
    } else {
      t.dk = t.dqkv + l.k_offset(kv);
      t.dv = t.dqkv + l.v_offset(kv);
      t.kv_ld = g.row;
    }
    for (int64_t qb = g.blocks - 1 - part; qb >= 0; qb -= parts)
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) BackwardBlock(g, t, b, h, kv, qb);
  }
  if (parts > 1) AddPrivateKV(g, priv, parts, dqkv);
  return OkStatus();
}

// The bf16 path's primitives, made when the executor is built (a second input, pads or document
// starts, keeps the fp32 path; its contents are not there yet).
Status Prepare(const OpArgs& args) {
  if (args.in.size() > 1) return OkStatus();
  Geometry g;
  DS_RETURN_IF_ERROR(MakeGeometry(args, &g));
  if (!UseBf16(args, g)) return OkStatus();
  return PrepareBf16Attention(Bf16Shape(g), !args.grad_in.empty() && args.grad_in[0].defined());
}

Kernel MakeKernel() {
  Kernel k{Forward, Backward, Prepare};
  k.bf16_act_inputs = 1u;  // qkv (the fp32 path widens it)
  k.bf16_act_outputs = 1u;
  return k;
}

const bool kRegistered = RegisterKernel("attention", Device::kCpu, DType::kF32, MakeKernel());

}  // namespace
}  // namespace ds::kernels::cpu
