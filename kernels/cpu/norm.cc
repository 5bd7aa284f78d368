// layernorm and rmsnorm over the last dim: x [..., C] viewed as N rows of C; gamma [C]
// (layernorm also beta [C]); attr eps. One row kernel, with the centring switched on for
// layernorm (Kind::kCentered) and off for rmsnorm (Llama):
//   mean = sum(x) / C (rmsnorm: 0),  rstd = 1 / sqrt(sum((x - mean)^2) / C + eps)
//   xhat = (x - mean) rstd,  y = xhat gamma (+ beta)
// saved: layernorm mean [N], rstd [N]; rmsnorm rstd [N] (fp32). Backward, per row with
// g = dy gamma:
//   dx += rstd (g - mean(g) - xhat mean(g xhat))   (rmsnorm: no mean(g) term),
//   dgamma += sum_rows dy xhat,  dbeta += sum_rows dy.
// dgamma/dbeta: each thread sums its rows into a private slice of scratch, then the slices
// are added in chunk order (deterministic for a fixed thread count).
// Attr unit_offset (rmsnorm, Gemma): the scale is 1 + gamma; dgamma is unchanged.
// Backward reads x and gamma. y may be a bf16 activation (act_io.h), rounded once per value, and
// dy a bf16 gradient.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"
#include "runtime/core/bf16_simd.h"

namespace ds::kernels::cpu {
namespace {

struct LayerNorm {
  static constexpr bool kCentered = true;
  static constexpr double kDefaultEps = 1e-5;
};
struct RmsNorm {
  static constexpr bool kCentered = false;
  static constexpr double kDefaultEps = 1e-6;
};

int64_t RowGrain(int64_t c) { return kElementwiseGrain / std::max<int64_t>(c, 1) + 1; }

// gamma, or with attr unit_offset (Gemma's (1 + w) norms) 1 + gamma in the calling thread's
// scratch slot 1, which the row workers read.
const float* EffectiveGamma(const OpArgs& args, int64_t c) {
  const float* gamma = args.in[1].f32();
  if (!args.attrs || args.attrs->Int("unit_offset", 0) == 0) return gamma;
  float* g = ThreadScratch(1, c);
  for (int64_t j = 0; j < c; ++j) g[j] = 1.f + gamma[j];
  return g;
}

// kBf16Out: y is a bf16 activation, each row rounded from fp32 scratch. The fp32 instance is the
// kernel as it was before bf16 outputs, instruction for instruction (its reductions' order, on
// which long runs' last bits depend, unchanged).
template <class Kind, bool kBf16Out>
Status ForwardAs(const OpArgs& args) {
  constexpr bool kC = Kind::kCentered;
  const Tensor& x = args.in[0];
  const int64_t c = x.dim(-1), n = LeadingRows(x.shape());
  const float eps = static_cast<float>(args.attrs ? args.attrs->Float("eps", Kind::kDefaultEps)
                                                  : Kind::kDefaultEps);
  const float* xp = x.f32();
  const float* gamma = EffectiveGamma(args, c);
  const float* beta = kC ? args.in[2].f32() : nullptr;
  float* y = kBf16Out ? nullptr : args.out[0].f32();
  uint16_t* y16 = kBf16Out ? static_cast<uint16_t*>(args.out[0].data()) : nullptr;
  float* mean_out = kC ? args.saved[0].f32() : nullptr;
  float* rstd_out = args.saved[kC ? 1 : 0].f32();
  ParallelFor(n, RowGrain(c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * c;
      float mean = 0.f;
      if constexpr (kC) {
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < c; ++j) sum += row[j];
        mean = sum / c;
      }
      float var = 0.f;
#pragma omp simd reduction(+ : var)
      for (int64_t j = 0; j < c; ++j) var += (row[j] - mean) * (row[j] - mean);
      const float rstd = 1.f / std::sqrt(var / c + eps);
      float* out = kBf16Out ? ThreadScratch(3, c) : y + r * c;
      if constexpr (kC) {
        for (int64_t j = 0; j < c; ++j) out[j] = (row[j] - mean) * rstd * gamma[j] + beta[j];
        mean_out[r] = mean;
      } else {
        for (int64_t j = 0; j < c; ++j) out[j] = row[j] * rstd * gamma[j];
      }
      if constexpr (kBf16Out) RoundToBf16Run(out, y16 + r * c, c);
      rstd_out[r] = rstd;
    }
  });
  return OkStatus();
}

template <class Kind>
Status Forward(const OpArgs& args) {
  return IsBf16(args.out[0]) ? ForwardAs<Kind, true>(args) : ForwardAs<Kind, false>(args);
}

// grads[w] += the chunks' partial rows (chunk k's row w at partial + (k width + w) c), in chunk
// order: dgamma (and dbeta).
void AddPartials(const float* partial, int chunks, int64_t c, int width, float* const* grads) {
  for (int k = 0; k < chunks; ++k)
    for (int w = 0; w < width; ++w) {
      if (!grads[w]) continue;
      const float* p = partial + (k * width + w) * c;
      for (int64_t j = 0; j < c; ++j) grads[w][j] += p[j];
    }
}

// sum_j g_j (centred only) and sum_j g_j xhat_j of one row, g = dy gamma. The fp32 instance
// (kLanes false) is the kernel's loop as it always was; the bf16-dy one sums in 16 lane-wise
// partials that the compiler keeps in vector registers (GCC leaves the two-variable `omp simd`
// reduction scalar: three quarters of the backward's time), folded in lane order at the end.
template <bool kC, bool kLanes16>
inline void RowSums(const float* dy, const float* gamma, const float* x, float m, float s,
                    int64_t c, float* sum_g, float* sum_gx) {
  if constexpr (!kLanes16) {
    float g = 0.f, gx = 0.f;
#pragma omp simd reduction(+ : g, gx)
    for (int64_t j = 0; j < c; ++j) {
      const float gj = dy[j] * gamma[j];
      if constexpr (kC) g += gj;
      gx += gj * (x[j] - m) * s;
    }
    *sum_g = g;
    *sum_gx = gx;
    return;
  }
  constexpr int kLanes = 16;
  float lg[kLanes] = {}, lgx[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float gj = dy[j + l] * gamma[j + l];
      if constexpr (kC) lg[l] += gj;
      lgx[l] += gj * (x[j + l] - m) * s;
    }
  for (; j < c; ++j) {
    const float gj = dy[j] * gamma[j];
    if constexpr (kC) lg[0] += gj;
    lgx[0] += gj * (x[j] - m) * s;
  }
  for (int l = 0; l < kLanes; ++l) {
    *sum_g += lg[l];
    *sum_gx += lgx[l];
  }
}

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// One row of the bf16-dy backward on AVX-512 (c % 16 == 0): dy widened 16 values at a time in
// registers, never stored; RowSums' 16 lane-wise partials folded in lane order, then the row's
// dgamma, dbeta partials and dx. The arithmetic is RowSums' and the loop's below, so the values
// agree with the fp32 form's to rounding.
template <bool kC>
__attribute__((target("avx512f,fma"))) void RowBackwardBf16x16(const uint16_t* dy,
                                                               const float* gamma, const float* x,
                                                               float m, float s, int64_t c,
                                                               float* pg, float* pb, float* dx) {
  const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(s);
  __m512 lg = _mm512_setzero_ps(), lgx = _mm512_setzero_ps();
  for (int64_t j = 0; j < c; j += 16) {
    const __m512 gj = _mm512_mul_ps(bf16_simd::Load16(dy + j), _mm512_loadu_ps(gamma + j));
    if constexpr (kC) lg = _mm512_add_ps(lg, gj);
    const __m512 centred = _mm512_sub_ps(_mm512_loadu_ps(x + j), vm);
    lgx = _mm512_fmadd_ps(_mm512_mul_ps(gj, centred), vs, lgx);
  }
  alignas(64) float lanes_g[16], lanes_gx[16];
  _mm512_store_ps(lanes_g, lg);
  _mm512_store_ps(lanes_gx, lgx);
  float sum_g = 0.f, sum_gx = 0.f;
  for (int l = 0; l < 16; ++l) {
    sum_g += lanes_g[l];
    sum_gx += lanes_gx[l];
  }
  const __m512 mean_g = _mm512_set1_ps(kC ? sum_g / c : 0.f);
  const __m512 mean_gx = _mm512_set1_ps(sum_gx / c);
  for (int64_t j = 0; j < c; j += 16) {
    const __m512 d = bf16_simd::Load16(dy + j);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm), vs);
    _mm512_storeu_ps(pg + j, _mm512_fmadd_ps(d, xhat, _mm512_loadu_ps(pg + j)));
    if constexpr (kC) _mm512_storeu_ps(pb + j, _mm512_add_ps(_mm512_loadu_ps(pb + j), d));
    if (!dx) continue;
    const __m512 t = _mm512_fnmadd_ps(
        xhat, mean_gx, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_loadu_ps(gamma + j)), mean_g));
    _mm512_storeu_ps(dx + j, _mm512_fmadd_ps(vs, t, _mm512_loadu_ps(dx + j)));
  }
}
#pragma GCC diagnostic pop

// kBf16Dy: dy is a bf16 gradient: on AVX-512 each row in registers (RowBackwardBf16x16);
// elsewhere widened into fp32 scratch and the row sums taken by RowSums (the fp32 instance as
// ForwardAs's: its order of summing unchanged).
template <class Kind, bool kBf16Dy>
Status BackwardAs(const OpArgs& args) {
  constexpr bool kC = Kind::kCentered;
  constexpr int kWidth = kC ? 2 : 1;  // partial rows per chunk: dgamma (and dbeta)
  const Tensor& x = args.in[0];
  const int64_t c = x.dim(-1), n = LeadingRows(x.shape());
  const float* xp = x.f32();
  const float* gamma = EffectiveGamma(args, c);
  const float* dy = kBf16Dy ? nullptr : args.grad_out[0].f32();
  const uint16_t* dy16 = kBf16Dy ? Bf16Data(args.grad_out[0]) : nullptr;
  const float* mean = kC ? args.saved[0].f32() : nullptr;
  const float* rstd = args.saved[kC ? 1 : 0].f32();
  float* dx = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  float* grads[kWidth];
  for (int k = 0; k < kWidth; ++k)
    grads[k] = args.grad_in[1 + k].defined() ? args.grad_in[1 + k].f32() : nullptr;

  const int chunks = PlannedThreads(n, RowGrain(c));
  const size_t slice = static_cast<size_t>(kWidth) * c;
  float* partial = ThreadScratch(0, chunks * slice);
  std::fill(partial, partial + chunks * slice, 0.f);
  const bool wide = kBf16Dy && CpuHasAvx512() && c % 16 == 0;
  ParallelChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    float* pg = partial + chunk * slice;  // dgamma partial
    float* pb = pg + c;                   // dbeta partial (layernorm)
    float* dy_row = kBf16Dy ? ThreadScratch(3, c) : nullptr;
    for (int64_t r = begin; r < end && wide; ++r)
      RowBackwardBf16x16<kC>(dy16 + r * c, gamma, xp + r * c, kC ? mean[r] : 0.f, rstd[r], c, pg,
                             pb, dx ? dx + r * c : nullptr);
    if (wide) return;
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * c;
      if constexpr (kBf16Dy) WidenBf16Run(dy16 + r * c, dy_row, c);
      const float* dyr = kBf16Dy ? dy_row : dy + r * c;
      const float m = kC ? mean[r] : 0.f, s = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;
      RowSums<kC, kBf16Dy>(dyr, gamma, xr, m, s, c, &sum_g, &sum_gx);
      const float mean_g = sum_g / c, mean_gx = sum_gx / c;  // mean_g 0 for rmsnorm
      float* dxr = dx ? dx + r * c : nullptr;
      if (dxr) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const float xhat = (xr[j] - m) * s;
          pg[j] += dyr[j] * xhat;
          if constexpr (kC) pb[j] += dyr[j];
          dxr[j] += s * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          pg[j] += dyr[j] * ((xr[j] - m) * s);
          if constexpr (kC) pb[j] += dyr[j];
        }
      }
    }
  });
  AddPartials(partial, chunks, c, kWidth, grads);
  return OkStatus();
}

template <class Kind>
Status Backward(const OpArgs& args) {
  return IsBf16(args.grad_out[0]) ? BackwardAs<Kind, true>(args) : BackwardAs<Kind, false>(args);
}

template <class Kind>
Kernel MakeKernel() {
  Kernel k{Forward<Kind>, Backward<Kind>};
  k.bf16_act_outputs = 1u;   // y (x, the residual stream, stays fp32)
  k.bf16_grad_outputs = 1u;  // dy
  return k;
}

const bool kRegistered =
    RegisterKernel("layernorm", Device::kCpu, DType::kF32, MakeKernel<LayerNorm>()) &&
    RegisterKernel("rmsnorm", Device::kCpu, DType::kF32, MakeKernel<RmsNorm>());

}  // namespace
}  // namespace ds::kernels::cpu
