// DeepSpeed-Ulysses' CPU kernels (definitions and layouts: kernels/ops/ulysses.cc). The layout
// ops are lists of contiguous runs (offset in the token-major layout A, offset in the part-major
// layout B, length), copied A -> B (or B -> A with inverse) in forward and added back the other
// way in backward. Runs may leave padding in B (zeroed when B is written) and, for kv heads that
// ranks share, read one A run into several parts (their gradients sum in backward).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_util.h"
#include "kernels/head_split.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

int64_t Attr(const OpArgs& args, const char* key, int64_t dflt) {
  return args.attrs ? args.attrs->Int(key, dflt) : dflt;
}

Status ChunkForward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t sp = Attr(args, "sp_degree", 1), r = Attr(args, "sp_rank", 0);
  const int64_t b = x.dim(0), t = x.dim(1), tl = t / sp;
  const int64_t row = x.nbytes() / (b * t);  // bytes per position
  const char* src = static_cast<const char*>(x.data());
  char* dst = static_cast<char*>(args.out[0].data());
  for (int64_t i = 0; i < b; ++i)
    std::memcpy(dst + i * tl * row, src + (i * t + r * tl) * row, tl * row);
  return OkStatus();
}

Status ChunkBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const Tensor& x = args.in[0];
  const int64_t sp = Attr(args, "sp_degree", 1), r = Attr(args, "sp_rank", 0);
  const int64_t b = x.dim(0), t = x.dim(1), tl = t / sp, row = x.numel() / (b * t);
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < tl * row; ++k) dx[(i * t + r * tl) * row + k] += dy[i * tl * row + k];
  return OkStatus();
}

// The head segments "H,KV,KV" (at most 8), without allocating.
int ParseHeads(const OpArgs& args, int64_t* heads) {
  const std::string& text = args.attrs->strings().at("heads");
  const char* p = text.c_str();
  int n = 0;
  while (*p && n < 8) {
    char* end = nullptr;
    heads[n++] = std::strtoll(p, &end, 10);
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

// The model's head counts: attrs n_head and n_kv_head, by default the first two segments.
void HeadCounts(const OpArgs& args, const int64_t* heads, int segments, int64_t* h, int64_t* kv) {
  *h = Attr(args, "n_head", heads[0]);
  *kv = Attr(args, "n_kv_head", segments > 1 ? heads[1] : heads[0]);
}

// ulysses_heads: A = [B, Tl, W] (token-major), B = [sp, B, Tl, P] with rank j's heads of each
// segment at the start of part j (kernels/head_split.h); fn(a, b, len) per run. Its forward
// reads A.
struct HeadRuns {
  static constexpr bool kReadsA = true;
  template <typename Fn>
  static void Each(const OpArgs& args, const Fn& fn) {
    const bool inverse = Attr(args, "inverse", 0) != 0;
    const Tensor& a = inverse ? args.out[0] : args.in[0];
    const Tensor& p = inverse ? args.in[0] : args.out[0];
    const int64_t sp = Attr(args, "sp_degree", 1), d = Attr(args, "head_dim", 1);
    int64_t heads[8], h = 0, kv = 0;
    const int segments = ParseHeads(args, heads);
    HeadCounts(args, heads, segments, &h, &kv);
    const int64_t n = a.dim(0) * a.dim(1), w = a.dim(2), wp = p.dim(3);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < sp; ++j) {
        int64_t seg = 0, local = 0;
        for (int k = 0; k < segments; ++k) {
          const HeadRange r = SegmentHeads(heads[k], h, kv, sp, j);
          fn(t * w + seg + r.begin * d, (j * n + t) * wp + local, r.size() * d);
          seg += heads[k] * d;
          local += r.size() * d;
        }
      }
  }
  // Whether some part ends in padding.
  static bool Padded(const OpArgs& args) {
    const Tensor& p = Attr(args, "inverse", 0) != 0 ? args.in[0] : args.out[0];
    const int64_t sp = Attr(args, "sp_degree", 1), d = Attr(args, "head_dim", 1);
    int64_t heads[8], h = 0, kv = 0;
    const int segments = ParseHeads(args, heads);
    HeadCounts(args, heads, segments, &h, &kv);
    for (int64_t j = 0; j < sp; ++j) {
      int64_t w = 0;
      for (int k = 0; k < segments; ++k) w += SegmentHeads(heads[k], h, kv, sp, j).size() * d;
      if (w < p.dim(3)) return true;
    }
    return false;
  }
};

// ulysses_time: A = [B, sp Tl, Wl] (all positions), B = [sp, B, Tl, P] (Wl <= P). Its forward
// writes A.
struct TimeRuns {
  static constexpr bool kReadsA = false;
  template <typename Fn>
  static void Each(const OpArgs& args, const Fn& fn) {
    const bool inverse = Attr(args, "inverse", 0) != 0;
    const Tensor& p = inverse ? args.out[0] : args.in[0];  // the part-major side
    const Tensor& a = inverse ? args.in[0] : args.out[0];
    const int64_t sp = p.dim(0), b = p.dim(1), tl = p.dim(2), wp = p.dim(3), wl = a.dim(2);
    for (int64_t j = 0; j < sp; ++j)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t t = 0; t < tl; ++t)
          fn((i * sp * tl + j * tl + t) * wl, ((j * b + i) * tl + t) * wp, wl);
  }
  static bool Padded(const OpArgs& args) {
    const bool inverse = Attr(args, "inverse", 0) != 0;
    const Tensor& p = inverse ? args.out[0] : args.in[0];
    const Tensor& a = inverse ? args.in[0] : args.out[0];
    return a.dim(2) < p.dim(3);
  }
};

// The input is side A when the op's forward reads A, flipped by `inverse`.
template <typename Runs>
bool InputIsA(const OpArgs& args) {
  return Runs::kReadsA != (Attr(args, "inverse", 0) != 0);
}

template <typename Runs>
Status PermuteForward(const OpArgs& args) {
  const bool in_a = InputIsA<Runs>(args);
  const float* in = args.in[0].f32();
  float* out = args.out[0].f32();
  if (in_a && Runs::Padded(args)) std::memset(out, 0, args.out[0].nbytes());
  Runs::Each(args, [&](int64_t a, int64_t b, int64_t len) {
    std::memcpy(out + (in_a ? b : a), in + (in_a ? a : b), len * sizeof(float));
  });
  return OkStatus();
}

template <typename Runs>
Status PermuteBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const bool in_a = InputIsA<Runs>(args);
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  Runs::Each(args, [&](int64_t a, int64_t b, int64_t len) {
    const float* src = dy + (in_a ? b : a);
    float* dst = dx + (in_a ? a : b);
    for (int64_t k = 0; k < len; ++k) dst[k] += src[k];
  });
  return OkStatus();
}

Status Nothing(const OpArgs&) { return OkStatus(); }

// The row's log-sum-exp.
float Lse(const float* x, int64_t v) {
  const float m = MaxArray(x, v);
  float z[kChunk];
  double s = 0;
  for (int64_t c = 0; c < v; c += kChunk) s += ExpShiftSum(x + c, z, std::min(kChunk, v - c), m);
  return m + static_cast<float>(std::log(s));
}

Status StatsForward(const OpArgs& args) {
  const int64_t v = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const int64_t ignore = Attr(args, "ignore_index", -100);
  const float* x = args.in[0].f32();
  const int32_t* t = args.in[1].i32();
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] == ignore) continue;
    if (t[r] < 0 || t[r] >= v)
      return InvalidArgumentError(StrCat("cross_entropy: target ", t[r], " at position ", r,
                                         " is out of range for V=", v, " (ignore_index is ", ignore,
                                         ")"));
    sum += static_cast<double>(Lse(x + r * v, v)) - x[r * v + t[r]];
    ++count;
  }
  args.out[0].f32()[0] = static_cast<float>(sum);
  args.out[0].f32()[1] = static_cast<float>(count);
  return OkStatus();
}

Status LossForward(const OpArgs& args) {
  const float* s = args.in[2].f32();
  args.out[0].f32()[0] = s[1] > 0 ? s[0] / s[1] : 0.f;
  return OkStatus();
}

Status LossBackward(const OpArgs& args) {
  const float* s = args.in[2].f32();
  if (!args.grad_in[0].defined() || s[1] <= 0) return OkStatus();
  const int64_t v = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const int64_t ignore = Attr(args, "ignore_index", -100);
  const float scale = args.grad_out[0].f32()[0] / s[1];
  const float* x = args.in[0].f32();
  const int32_t* t = args.in[1].i32();
  float* dx = args.grad_in[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t lo, int64_t hi) {
    float z[kChunk];
    for (int64_t r = lo; r < hi; ++r) {
      if (t[r] == ignore) continue;
      const float lse = Lse(x + r * v, v);
      for (int64_t c = 0; c < v; c += kChunk) {
        const int64_t w = std::min(kChunk, v - c);
        ExpShiftSum(x + r * v + c, z, w, lse);
        for (int64_t j = 0; j < w; ++j) dx[r * v + c + j] += scale * z[j];
      }
      dx[r * v + t[r]] -= scale;
    }
  });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("seq_chunk", Device::kCpu, DType::kF32, {ChunkForward, ChunkBackward}) &&
    RegisterKernel("ulysses_heads", Device::kCpu, DType::kF32,
                   {PermuteForward<HeadRuns>, PermuteBackward<HeadRuns>}) &&
    RegisterKernel("ulysses_time", Device::kCpu, DType::kF32,
                   {PermuteForward<TimeRuns>, PermuteBackward<TimeRuns>}) &&
    RegisterKernel("seq_all_to_all", Device::kCpu, DType::kF32, {Nothing, Nothing}) &&
    RegisterKernel("seq_ce_stats", Device::kCpu, DType::kF32, {StatsForward, Nothing}) &&
    RegisterKernel("seq_ce_loss", Device::kCpu, DType::kF32, {LossForward, LossBackward});

}  // namespace
}  // namespace ds::kernels::cpu
