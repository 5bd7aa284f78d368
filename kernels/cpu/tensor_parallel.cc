// The tensor-parallel ops' CPU kernels (definitions: kernels/ops/tensor_parallel.cc).
//   bias_add: y = x + b per row; dx += dy, db += the column sums of dy.
//   vocab_max / vocab_ce_stats / vocab_ce_loss: the vocab-parallel cross-entropy of a rank's
//   logits shard [N, V_local] holding columns [vocab_start, vocab_start + V_local) of
//   vocab_size. With m and s all-reduced in between, every rank's loss is the full one:
//     loss = mean over rows not ignored of  lse_r - logit[r, target_r],  lse_r = m_r + log s0_r
//   and backward adds dloss / count (exp(x - lse_r) - onehot) to the shard's dlogits, as the
//   full cross_entropy kernel does for its columns.
//   sp_split copies its token chunk (backward adds it back); sp_gather and sp_scatter do nothing:
//   the plan's all-gather and reduce-scatter write their outputs and gradients (sp_gather with
//   grad_chunk: backward adds the chunk's rows of the whole gradient).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

int64_t Attr(const OpArgs& args, const char* key, int64_t dflt) {
  return args.attrs ? args.attrs->Int(key, dflt) : dflt;
}

Status BiasForward(const OpArgs& args) {
  const int64_t c = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const float* x = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t j = 0; j < c; ++j) y[r * c + j] = x[r * c + j] + b[j];
  });
  return OkStatus();
}

Status BiasBackward(const OpArgs& args) {
  const int64_t c = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const float* dy = args.grad_out[0].f32();
  if (args.grad_in[0].defined()) {
    float* dx = args.grad_in[0].f32();
    ParallelFor(n * c, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) dx[i] += dy[i];
    });
  }
  if (args.grad_in[1].defined()) {
    float* db = args.grad_in[1].f32();
    // Threads split the columns; each sums its rows in order (a fixed order).
    ParallelFor(c, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
                [&](int64_t lo, int64_t hi) {
                  for (int64_t j = lo; j < hi; ++j) {
                    double s = 0;
                    for (int64_t r = 0; r < n; ++r) s += dy[r * c + j];
                    db[j] += static_cast<float>(s);
                  }
                });
  }
  return OkStatus();
}

Status MaxForward(const OpArgs& args) {
  const int64_t v = args.in[0].dim(-1), n = LeadingRows(args.in[0].shape());
  const float* x = args.in[0].f32();
  float* m = args.out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) m[r] = MaxArray(x + r * v, v);
  });
  return OkStatus();
}

Status NoBackward(const OpArgs&) { return OkStatus(); }

Status StatsForward(const OpArgs& args) {
  const Tensor& logits = args.in[0];
  const int64_t v = logits.dim(-1), n = LeadingRows(logits.shape());
  const int64_t start = Attr(args, "vocab_start", 0), vocab = Attr(args, "vocab_size", v);
  const int64_t ignore = Attr(args, "ignore_index", -100);
  const int32_t* t = args.in[2].i32();
  for (int64_t r = 0; r < n; ++r)
    if (t[r] != ignore && (t[r] < 0 || t[r] >= vocab))
      return InvalidArgumentError(StrCat("cross_entropy: target ", t[r], " at position ", r,
                                         " is out of range for V=", vocab, " (ignore_index is ",
                                         ignore, ")"));
  const float* x = logits.f32();
  const float* m = args.in[1].f32();
  float* s = args.out[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t lo, int64_t hi) {
    float z[kChunk];
    for (int64_t r = lo; r < hi; ++r) {
      double total = 0;
      for (int64_t c = 0; c < v; c += kChunk)
        total += ExpShiftSum(x + r * v + c, z, std::min(kChunk, v - c), m[r]);
      const int64_t col = t[r] - start;
      s[2 * r] = static_cast<float>(total);
      s[2 * r + 1] = t[r] != ignore && col >= 0 && col < v ? x[r * v + col] : 0.f;
    }
  });
  return OkStatus();
}

float Lse(const float* m, const float* s, int64_t r) { return m[r] + std::log(s[2 * r]); }

Status LossForward(const OpArgs& args) {
  const int64_t n = LeadingRows(args.in[0].shape());
  const int64_t ignore = Attr(args, "ignore_index", -100);
  const float* m = args.in[1].f32();
  const float* s = args.in[2].f32();
  const int32_t* t = args.in[3].i32();
  double total = 0;  // serial: a fixed summation order
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] == ignore) continue;
    total += static_cast<double>(Lse(m, s, r)) - s[2 * r + 1];
    ++count;
  }
  args.out[0].f32()[0] = count ? static_cast<float>(total / count) : 0.f;
  return OkStatus();
}

Status LossBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const Tensor& logits = args.in[0];
  const int64_t v = logits.dim(-1), n = LeadingRows(logits.shape());
  const int64_t start = Attr(args, "vocab_start", 0);
  const int64_t ignore = Attr(args, "ignore_index", -100);
  const float* m = args.in[1].f32();
  const float* s = args.in[2].f32();
  const int32_t* t = args.in[3].i32();
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += t[r] != ignore;
  if (count == 0) return OkStatus();
  const float scale = args.grad_out[0].f32()[0] / static_cast<float>(count);
  const float* x = logits.f32();
  float* dx = args.grad_in[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t lo, int64_t hi) {
    float z[kChunk];
    for (int64_t r = lo; r < hi; ++r) {
      if (t[r] == ignore) continue;
      const float lse = Lse(m, s, r);
      for (int64_t c = 0; c < v; c += kChunk) {
        const int64_t w = std::min(kChunk, v - c);
        ExpShiftSum(x + r * v + c, z, w, lse);
        for (int64_t j = 0; j < w; ++j) dx[r * v + c + j] += scale * z[j];
      }
      const int64_t col = t[r] - start;
      if (col >= 0 && col < v) dx[r * v + col] -= scale;
    }
  });
  return OkStatus();
}

// sp_split: rows [r n, (r + 1) n) of x viewed as [tokens, C].
Status SplitForward(const OpArgs& args) {
  const int64_t n = args.out[0].numel(), r = Attr(args, "sp_rank", 0);
  const float* x = args.in[0].f32() + r * n;
  std::copy(x, x + n, args.out[0].f32());
  return OkStatus();
}

Status SplitBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const int64_t n = args.grad_out[0].numel(), r = Attr(args, "sp_rank", 0);
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32() + r * n;
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i];
  return OkStatus();
}

// sp_gather with grad_chunk: the rank's rows of the whole gradient (the same on every rank).
Status GatherBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined() || Attr(args, "grad_chunk", 0) == 0) return OkStatus();
  const int64_t n = args.grad_in[0].numel(), r = Attr(args, "sp_rank", 0);
  const float* dy = args.grad_out[0].f32() + r * n;
  float* dx = args.grad_in[0].f32();
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i];
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("sp_split", Device::kCpu, DType::kF32, {SplitForward, SplitBackward}) &&
    RegisterKernel("sp_gather", Device::kCpu, DType::kF32, {NoBackward, GatherBackward}) &&
    RegisterKernel("sp_scatter", Device::kCpu, DType::kF32, {NoBackward, NoBackward}) &&
    RegisterKernel("bias_add", Device::kCpu, DType::kF32, {BiasForward, BiasBackward}) &&
    RegisterKernel("vocab_max", Device::kCpu, DType::kF32, {MaxForward, NoBackward}) &&
    RegisterKernel("vocab_ce_stats", Device::kCpu, DType::kF32, {StatsForward, NoBackward}) &&
    RegisterKernel("vocab_ce_loss", Device::kCpu, DType::kF32, {LossForward, LossBackward});

}  // namespace
}  // namespace ds::kernels::cpu
