// cross_entropy: logits [..., V] as N rows, targets int32 [...] (the leading dims);
// attr ignore_index (default -100). Output loss [1] = mean over non-ignored rows of
//   lse_r - logits[r, target_r],  lse_r = log sum_j exp(logits[r, j]),
// or 0 when every row is ignored. saved: lse [N] (0 for ignored rows).
// Backward: dlogits[r, :] += dloss (softmax_r - onehot(target_r)) / count for
// non-ignored rows, nothing for ignored ones. Backward reads logits and targets.
// A target outside [0, V) that is not ignore_index is an InvalidArgument (forward).
// The logits may be a bf16 activation (act_io.h): each row is widened as it is read; a fresh
// gradient may be bf16, each value rounded once. Where both are bf16 and the CPU has AVX-512,
// the rows are read (and the gradient written) 16 values at a time in registers, without an
// fp32 copy of the row.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/exp_simd.h"
#include "kernels/registry.h"
#include "runtime/core/bf16_simd.h"

namespace ds::kernels::cpu {
namespace {

int64_t IgnoreIndex(const OpArgs& args) {
  return args.attrs ? args.attrs->Int("ignore_index", -100) : -100;
}

int64_t CountTargets(const int32_t* targets, int64_t n, int64_t ignore) {
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += targets[r] != ignore;
  return count;
}

// log sum_j exp(x[j]) over v entries, stable (max subtracted).
float LogSumExp(const float* x, int64_t v) {
  const float m = MaxArray(x, v);
  double total = 0.0;
  float z[kChunk];
  for (int64_t c = 0; c < v; c += kChunk)
    total += ExpShiftSum(x + c, z, std::min(kChunk, v - c), m);
  return m + static_cast<float>(std::log(total));
}

// Whether the 16-lane bf16 row loops below run: bf16 logits, AVX-512.
bool Bf16Rows(const Tensor& t) {
#if defined(__AVX2__) && defined(__FMA__)
  return IsBf16(t) && CpuHasAvx512();
#else
  return false;
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The last n < 16 values of a bf16 row, widened into 16 lanes (zeros after them).
__attribute__((target("avx512f"))) __m512 LoadTail(const uint16_t* x, int64_t n) {
  alignas(64) uint16_t tmp[16] = {};
  std::copy(x, x + n, tmp);
  return bf16_simd::Load16(tmp);
}

// LogSumExp of a bf16 row of v values: the max, then per chunk of kChunk the sum of exp(x - max)
// in lane-wise fp32 partial sums and the chunk's last v % 16 values as ExpShiftSum takes them,
// folded into double: the bits of LogSumExp over the widened row.
__attribute__((target("avx512f,fma"))) float LogSumExpBf16(const uint16_t* x, int64_t v) {
  const int64_t full = v / 16 * 16;
  float m = Bf16ToFloat(x[0]);
  if (full) {
    __m512 mx = bf16_simd::Load16(x);
    for (int64_t j = 16; j < full; j += 16) mx = _mm512_max_ps(mx, bf16_simd::Load16(x + j));
    m = _mm512_reduce_max_ps(mx);
  }
  for (int64_t j = full; j < v; ++j) m = std::max(m, Bf16ToFloat(x[j]));
  const __m512 vm = _mm512_set1_ps(m);
  double total = 0.0;
  for (int64_t c = 0; c < v; c += kChunk) {
    const int64_t end = std::min(v, c + kChunk), whole = c + (end - c) / 16 * 16;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = c; j < whole; j += 16)
      acc = _mm512_add_ps(acc, exp_simd::Exp16(_mm512_sub_ps(bf16_simd::Load16(x + j), vm)));
    float sum = 0.f;
    sum += _mm512_reduce_add_ps(acc);
    if (whole < end) {
      alignas(64) float tail[16], z[16];
      _mm512_store_ps(tail, LoadTail(x + whole, end - whole));
      ExpShiftSumRest(tail, z, 0, end - whole, m, &sum);
    }
    total += sum;
  }
  return m + static_cast<float>(std::log(total));
}

// scale (exp(x - lse) - onehot(target)) for the 16 values from column j.
__attribute__((target("avx512f,fma"))) __m512 Grad16(__m512 x, int64_t j, __m512 lse, __m512 scale,
                                                     int64_t target) {
  __m512 g = _mm512_mul_ps(scale, exp_simd::Exp16(_mm512_sub_ps(x, lse)));
  if (target >= j && target < j + 16)
    g = _mm512_mask_sub_ps(g, static_cast<__mmask16>(1u << (target - j)), g, scale);
  return g;
}

// A fresh bf16 gradient row: dx = scale (exp(x - lse) - onehot(target)), each value rounded once.
__attribute__((target("avx512f,fma"))) void GradRowBf16(const uint16_t* x, int64_t v, float lse,
                                                        float scale, int64_t target, uint16_t* dx) {
  const __m512 vl = _mm512_set1_ps(lse), vs = _mm512_set1_ps(scale);
  const int64_t full = v / 16 * 16;
  for (int64_t j = 0; j < full; j += 16)
    bf16_simd::Store16(Grad16(bf16_simd::Load16(x + j), j, vl, vs, target), dx + j);
  if (full < v) {
    alignas(64) uint16_t tmp[16];
    bf16_simd::Store16(Grad16(LoadTail(x + full, v - full), full, vl, vs, target), tmp);
    std::copy(tmp, tmp + (v - full), dx + full);
  }
}
#pragma GCC diagnostic pop
#endif

Status Forward(const OpArgs& args) {
  const Tensor& logits = args.in[0];
  const int32_t* targets = args.in[1].i32();
  const int64_t v = logits.dim(-1), n = LeadingRows(logits.shape());
  const int64_t ignore = IgnoreIndex(args);
  for (int64_t r = 0; r < n; ++r) {
    if (targets[r] != ignore && (targets[r] < 0 || targets[r] >= v))
      return InvalidArgumentError(StrCat("cross_entropy: target ", targets[r], " at position ", r,
                                         " is out of range for V=", v, " (ignore_index is ", ignore,
                                         ")"));
  }
  float* lse = args.saved[0].f32();
  const bool fused = Bf16Rows(logits);
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t begin, int64_t end) {
    float* buf = IsBf16(logits) && !fused ? ThreadScratch(3, v) : nullptr;
    for (int64_t r = begin; r < end; ++r) {
      if (targets[r] == ignore) {
        lse[r] = 0.f;
        continue;
      }
#if defined(__AVX2__) && defined(__FMA__)
      if (fused) {
        lse[r] = LogSumExpBf16(Bf16Data(logits) + r * v, v);
        continue;
      }
#endif
      lse[r] = LogSumExp(ActRead(logits, r * v, v, buf), v);
    }
  });
  double total = 0.0;  // serial: a fixed summation order
  for (int64_t r = 0; r < n; ++r)
    if (targets[r] != ignore)
      total += static_cast<double>(lse[r]) - ActAt(logits, r * v + targets[r]);
  const int64_t count = CountTargets(targets, n, ignore);
  args.out[0].f32()[0] = count ? static_cast<float>(total / count) : 0.f;
  return OkStatus();
}

// dx += scale (softmax(x) - onehot(target)) per scored row; a fresh dx (OpArgs::fresh_grads) is
// written whole, its ignored rows as zeros.
Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const Tensor& logits = args.in[0];
  const int32_t* targets = args.in[1].i32();
  const int64_t v = logits.dim(-1), n = LeadingRows(logits.shape());
  const int64_t ignore = IgnoreIndex(args);
  const int64_t count = CountTargets(targets, n, ignore);
  const bool fresh = args.fresh_grads & 1u;
  const Tensor& dx = args.grad_in[0];  // fp32, or bf16 when fresh (bf16_grad_inputs)
  DS_RETURN_IF_ERROR(CheckBf16GradFresh(args, 0, "cross_entropy"));
  if (count == 0) {
    if (fresh) args.grad_in[0].Zero();
    return OkStatus();
  }
  const float scale = args.grad_out[0].f32()[0] / static_cast<float>(count);
  const float* lse = args.saved[0].f32();
#if defined(__AVX2__) && defined(__FMA__)
  if (IsBf16(dx) && Bf16Rows(logits)) {  // dx bf16 is fresh (CheckBf16GradFresh)
    uint16_t* d16 = static_cast<uint16_t*>(dx.data());
    ParallelFor(n, kElementwiseGrain / v + 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        if (targets[r] == ignore)
          std::fill(d16 + r * v, d16 + (r + 1) * v, uint16_t{0});
        else
          GradRowBf16(Bf16Data(logits) + r * v, v, lse[r], scale, targets[r], d16 + r * v);
      }
    });
    return OkStatus();
  }
#endif
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(v, 1) + 1, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    float* buf = IsBf16(logits) ? ThreadScratch(3, v) : nullptr;
    float* row = IsBf16(dx) ? ThreadScratch(2, v) : nullptr;
    for (int64_t r = begin; r < end; ++r) {
      float* dr = ActOut(dx, r * v, row);
      if (targets[r] == ignore) {
        if (fresh) std::fill(dr, dr + v, 0.f);
        ActStore(dx, r * v, v, dr);
        continue;
      }
      const float* xr = ActRead(logits, r * v, v, buf);
      for (int64_t c = 0; c < v; c += kChunk) {
        const int64_t w = std::min(kChunk, v - c);
        ExpShiftSum(xr + c, z, w, lse[r]);
        if (fresh) {
          for (int64_t j = 0; j < w; ++j) dr[c + j] = scale * z[j];
        } else {
          for (int64_t j = 0; j < w; ++j) dr[c + j] += scale * z[j];
        }
      }
      dr[targets[r]] -= scale;
      ActStore(dx, r * v, v, dr);
    }
  });
  return OkStatus();
}

Kernel MakeKernel() {
  Kernel k{Forward, Backward};
  k.bf16_act_inputs = 1u;   // the logits
  k.bf16_grad_inputs = 1u;  // and their gradient
  k.overwrites_fresh_grads = true;
  return k;
}

const bool kRegistered = RegisterKernel("cross_entropy", Device::kCpu, DType::kF32, MakeKernel());

}  // namespace
}  // namespace ds::kernels::cpu
