// The gated activations y = x s(x), with s a sigmoid, written once over the exponent each
// computes (ExpArray vectorizes it) and its derivative:
//   gelu (GPT-2's tanh approximation): y = 0.5 x (1 + tanh(u)),  u = k (x + a x^3),
//     k = sqrt(2 / pi), a = 0.044715. Since 1 + tanh(u) = 2 sigmoid(2u), y = x s with
//     s = 1 / (1 + exp(-2u)), which has no cancellation for large negative x.
//     dy/dx = s + x s (1 - s) 2 k (1 + 3 a x^2).
//   silu (swish): y = x s, s = sigmoid(x) = 1 / (1 + exp(-x)).  dy/dx = s (1 + x (1 - s)).
// Backward reads x; nothing is saved. x and y may be bf16 activations (act_io.h), and dy and a
// fresh dx (OpArgs::fresh_grads: written, not added) bf16 gradients. Where every tensor is bf16
// and the CPU has AVX-512, one pass does 16 values at a time in registers (widen, exponent,
// exp, the product, round); otherwise the loops work through fp32 chunks.
#include <algorithm>
#include <initializer_list>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/exp_simd.h"
#include "kernels/registry.h"
#include "runtime/core/bf16_simd.h"

namespace ds::kernels::cpu {
namespace {

struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
  static constexpr float kA = 0.044715f;
  // The argument of exp in s = 1 / (1 + exp(.)).
  static float Exponent(float x) { return -2.f * kK * (x + kA * x * x * x); }
  // dy dy/dx, given s.
  static float Grad(float dy, float x, float s) {
    const float du = 2.f * kK * (1.f + 3.f * kA * x * x);
    return dy * (s + x * s * (1.f - s) * du);
  }
#if defined(__AVX2__) && defined(__FMA__)
  // The scalar forms' operations as GCC contracts them (C fma(x, (a x) x, x); du = 2k fma(3a x,
  // x, 1); dy fma(x s (1 - s), du, s)), so both paths give the same bits.
  __attribute__((target("avx512f,fma"))) static __m512 Exponent16(__m512 x) {
    const __m512 ax2 = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(kA)), x);
    return _mm512_mul_ps(_mm512_fmadd_ps(x, ax2, x), _mm512_set1_ps(-2.f * kK));
  }
  __attribute__((target("avx512f,fma"))) static __m512 Grad16(__m512 dy, __m512 x, __m512 s) {
    const __m512 one = _mm512_set1_ps(1.f);
    const __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(x, _mm512_set1_ps(3.f * kA)), x, one);
    const __m512 du = _mm512_mul_ps(t, _mm512_set1_ps(2.f * kK));
    const __m512 xs1s = _mm512_mul_ps(_mm512_mul_ps(x, s), _mm512_sub_ps(one, s));
    return _mm512_mul_ps(dy, _mm512_fmadd_ps(xs1s, du, s));
  }
#endif
};

struct Silu {
  static constexpr const char* kName = "silu";
  static float Exponent(float x) { return -x; }
  static float Grad(float dy, float x, float s) { return dy * s * (1.f + x * (1.f - s)); }
#if defined(__AVX2__) && defined(__FMA__)
  __attribute__((target("avx512f,fma"))) static __m512 Exponent16(__m512 x) {
    return _mm512_sub_ps(_mm512_setzero_ps(), x);
  }
  __attribute__((target("avx512f,fma"))) static __m512 Grad16(__m512 dy, __m512 x, __m512 s) {
    const __m512 one = _mm512_set1_ps(1.f);
    const __m512 t = _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one);
    return _mm512_mul_ps(_mm512_mul_ps(dy, s), t);
  }
#endif
};

#if defined(__AVX2__) && defined(__FMA__)
// 1 + exp(Exponent(x)) on 16 lanes: y = x / it, s = 1 / it.
template <class Act>
__attribute__((target("avx512f,fma"))) inline __m512 OnePlusZ16(__m512 x) {
  return _mm512_add_ps(_mm512_set1_ps(1.f), exp_simd::Exp16(Act::Exponent16(x)));
}

// The all-bf16 passes over elements [begin, end): y = x s, and a fresh dx = dy dy/dx. They
// return where they stopped (a tail of under 16 is left to the chunk loop).
template <class Act>
__attribute__((target("avx512f,fma"))) int64_t ForwardBf16x16(const uint16_t* x, uint16_t* y,
                                                              int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = bf16_simd::Load16(x + i);
    bf16_simd::Store16(_mm512_div_ps(v, OnePlusZ16<Act>(v)), y + i);
  }
  return i;
}

template <class Act>
__attribute__((target("avx512f,fma"))) int64_t BackwardBf16x16(const uint16_t* x,
                                                               const uint16_t* dy, uint16_t* dx,
                                                               int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = bf16_simd::Load16(x + i);
    const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.f), OnePlusZ16<Act>(v));
    const __m512 g = Act::Grad16(bf16_simd::Load16(dy + i), v, s);
    bf16_simd::Store16(g, dx + i);
  }
  return i;
}
#endif

// Whether the 16-lane all-bf16 passes apply: every tensor bf16 (a bf16 dx is fresh).
bool AllBf16(std::initializer_list<const Tensor*> ts) {
#if defined(__AVX2__) && defined(__FMA__)
  if (!CpuHasAvx512()) return false;
  for (const Tensor* t : ts)
    if (!IsBf16(*t)) return false;
  return true;
#else
  return false;
#endif
}

// z[i] = exp(Exponent(x[i])) for m elements.
template <class Act>
inline void ExpOf(const float* x, float* z, int64_t m) {
  for (int64_t i = 0; i < m; ++i) z[i] = Act::Exponent(x[i]);
  ExpArray(z, z, m);
}

template <class Act>
Status Forward(const OpArgs& args) {
  const Tensor& xt = args.in[0];
  const Tensor& yt = args.out[0];
  [[maybe_unused]] const bool fused = AllBf16({&xt, &yt});
  ParallelFor(xt.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk], xb[kChunk], yb[kChunk];
#if defined(__AVX2__) && defined(__FMA__)
    if (fused)
      begin = ForwardBf16x16<Act>(Bf16Data(xt), static_cast<uint16_t*>(yt.data()), begin, end);
#endif
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* x = ActRead(xt, c, m, xb);
      float* y = ActOut(yt, c, yb);
      ExpOf<Act>(x, z, m);
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] / (1.f + z[i]);
      ActStore(yt, c, m, y);
    }
  });
  return OkStatus();
}

template <class Act>
Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const Tensor& xt = args.in[0];
  const Tensor& dyt = args.grad_out[0];
  const Tensor& dxt = args.grad_in[0];
  const bool fresh = args.fresh_grads & 1u;
  DS_RETURN_IF_ERROR(CheckBf16GradFresh(args, 0, Act::kName));
  [[maybe_unused]] const bool fused = AllBf16({&xt, &dyt, &dxt});
  ParallelFor(xt.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk], xb[kChunk], dyb[kChunk], dxb[kChunk];
#if defined(__AVX2__) && defined(__FMA__)
    if (fused)
      begin = BackwardBf16x16<Act>(Bf16Data(xt), Bf16Data(dyt), static_cast<uint16_t*>(dxt.data()),
                                   begin, end);
#endif
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* x = ActRead(xt, c, m, xb);
      const float* dy = ActRead(dyt, c, m, dyb);
      float* dx = ActOut(dxt, c, dxb);
      ExpOf<Act>(x, z, m);
      for (int64_t i = 0; i < m; ++i) {
        const float g = Act::Grad(dy[i], x[i], 1.f / (1.f + z[i]));
        dx[i] = fresh ? g : dx[i] + g;
      }
      ActStore(dxt, c, m, dx);
    }
  });
  return OkStatus();
}

template <class Act>
Kernel MakeKernel() {
  Kernel k{Forward<Act>, Backward<Act>};
  k.bf16_act_inputs = k.bf16_act_outputs = 1u;
  k.bf16_grad_inputs = k.bf16_grad_outputs = 1u;
  k.overwrites_fresh_grads = true;
  return k;
}

const bool kRegistered = RegisterKernel("gelu", Device::kCpu, DType::kF32, MakeKernel<Gelu>()) &&
                         RegisterKernel("silu", Device::kCpu, DType::kF32, MakeKernel<Silu>());

}  // namespace
}  // namespace ds::kernels::cpu
