// Package-private: the vector loops of cpu_adam.h, written once over a lane type V (AVX-512 in
// cpu_adam_avx512.cc, AVX2 in cpu_adam_avx2.cc). Every path fuses exactly where the scalar loop
// calls fmaf and nowhere else (all three are compiled with -ffp-contract=off), so they agree to
// the bit. The remainder of a run that fills no whole vector goes to the scalar loop.
#pragma once

#include "runtime/core/cpu_adam.h"

namespace ds::internal {

// The scalar loops (cpu_adam.cc), for elements [begin, r.n).
void AdamScalar(const AdamRun& r, int64_t begin);
void SgdScalar(const SgdRun& r, int64_t begin);

template <class V, DType T, bool kModel>
void AdamLoop(const AdamRun& r) {
  using F = typename V::F;
  const F gs = V::Set(r.grad_scale), l2 = V::Set(r.l2), b1 = V::Set(r.b1),
          omb1 = V::Set(1.0f - r.b1), b2 = V::Set(r.b2), omb2 = V::Set(1.0f - r.b2),
          eps = V::Set(r.eps), ss = V::Set(r.step_size), inv = V::Set(r.inv_sqrt_bc2),
          decay = V::Set(r.decay);
  int64_t i = 0;
  for (; i + V::kLanes <= r.n; i += V::kLanes) {
    F p = V::Load(r.p + i);
    const F g = V::Fma(V::template LoadAs<T>(r.g, i), gs, V::Mul(l2, p));
    const F m = V::Fma(b1, V::Load(r.m + i), V::Mul(omb1, g));
    const F v = V::Fma(b2, V::Load(r.v + i), V::Mul(V::Mul(omb2, g), g));
    V::Store(r.m + i, m);
    V::Store(r.v + i, v);
    const F step = V::Div(V::Mul(ss, m), V::Fma(V::Sqrt(v), inv, eps));
    p = V::Sub(V::Mul(p, decay), step);
    V::Store(r.p + i, p);
    if constexpr (kModel) V::template StoreAs<T>(r.model, i, p);
  }
  AdamScalar(r, i);
}

template <class V, DType T, bool kModel>
void SgdLoop(const SgdRun& r) {
  using F = typename V::F;
  const F gs = V::Set(r.grad_scale), wd = V::Set(r.wd), mu = V::Set(r.mu), lr = V::Set(r.lr);
  int64_t i = 0;
  for (; i + V::kLanes <= r.n; i += V::kLanes) {
    F p = V::Load(r.p + i);
    F g = V::Fma(V::template LoadAs<T>(r.g, i), gs, V::Mul(wd, p));
    if (r.buf) {
      g = r.first ? g : V::Fma(mu, V::Load(r.buf + i), g);
      V::Store(r.buf + i, g);
    }
    p = V::Fma(V::Neg(lr), g, p);
    V::Store(r.p + i, p);
    if constexpr (kModel) V::template StoreAs<T>(r.model, i, p);
  }
  SgdScalar(r, i);
}

// The instantiation for the run's gradient / model dtype.
template <class V>
void AdamFor(const AdamRun& r) {
  switch (r.gt) {
    case DType::kBF16:
      return r.model ? AdamLoop<V, DType::kBF16, true>(r) : AdamLoop<V, DType::kBF16, false>(r);
    case DType::kF16:
      return r.model ? AdamLoop<V, DType::kF16, true>(r) : AdamLoop<V, DType::kF16, false>(r);
    default:
      return r.model ? AdamLoop<V, DType::kF32, true>(r) : AdamLoop<V, DType::kF32, false>(r);
  }
}

template <class V>
void SgdFor(const SgdRun& r) {
  switch (r.gt) {
    case DType::kBF16:
      return r.model ? SgdLoop<V, DType::kBF16, true>(r) : SgdLoop<V, DType::kBF16, false>(r);
    case DType::kF16:
      return r.model ? SgdLoop<V, DType::kF16, true>(r) : SgdLoop<V, DType::kF16, false>(r);
    default:
      return r.model ? SgdLoop<V, DType::kF32, true>(r) : SgdLoop<V, DType::kF32, false>(r);
  }
}

void AdamAvx512(const AdamRun& r);
void SgdAvx512(const SgdRun& r);
void AdamAvx2(const AdamRun& r);
void SgdAvx2(const SgdRun& r);

}  // namespace ds::internal
