#include "runtime/core/cpu_adam.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "runtime/core/cpu_adam_simd.h"
#include "runtime/core/cpu_isa.h"

namespace ds {
namespace internal {

void AdamScalar(const AdamRun& r, int64_t begin) {
  for (int64_t i = begin; i < r.n; ++i) {
    const float grad = std::fmaf(LoadFloat(r.g, r.gt, i), r.grad_scale, r.l2 * r.p[i]);
    const float mi = std::fmaf(r.b1, r.m[i], (1.0f - r.b1) * grad);
    const float vi = std::fmaf(r.b2, r.v[i], ((1.0f - r.b2) * grad) * grad);
    r.m[i] = mi;
    r.v[i] = vi;
    const float step = (r.step_size * mi) / std::fmaf(std::sqrt(vi), r.inv_sqrt_bc2, r.eps);
    const float pi = r.p[i] * r.decay - step;
    r.p[i] = pi;
    if (r.model) StoreFloat(r.model, r.gt, i, pi);
  }
}

void SgdScalar(const SgdRun& r, int64_t begin) {
  for (int64_t i = begin; i < r.n; ++i) {
    float grad = std::fmaf(LoadFloat(r.g, r.gt, i), r.grad_scale, r.wd * r.p[i]);
    if (r.buf) {
      r.buf[i] = r.first ? grad : std::fmaf(r.mu, r.buf[i], grad);
      grad = r.buf[i];
    }
    r.p[i] = std::fmaf(-r.lr, grad, r.p[i]);
    if (r.model) StoreFloat(r.model, r.gt, i, r.p[i]);
  }
}

}  // namespace internal

namespace {

enum class Isa { kScalar, kAvx2, kAvx512 };

// DS_CPU_ADAM_ISA=scalar|avx2 caps the choice (tests compare the paths on one machine), below
// DS_CPU_ISA's cap for every kernel.
Isa Detect() {
  __builtin_cpu_init();
  Isa best = Isa::kScalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) best = Isa::kAvx2;
  if (CpuHasAvx512()) best = Isa::kAvx512;  // DS_CPU_ISA can cap it (cpu_isa.h)
  const char* cap = std::getenv("DS_CPU_ADAM_ISA");
  if (cap && std::string(cap) == "scalar") return Isa::kScalar;
  if (cap && std::string(cap) == "avx2" && best == Isa::kAvx512) return Isa::kAvx2;
  return best;
}

Isa Chosen() {
  static const Isa isa = Detect();
  return isa;
}

}  // namespace

void AdamUpdate(const AdamRun& r) {
  switch (Chosen()) {
    case Isa::kAvx512:
      return internal::AdamAvx512(r);
    case Isa::kAvx2:
      return internal::AdamAvx2(r);
    default:
      return internal::AdamScalar(r, 0);
  }
}

void SgdUpdate(const SgdRun& r) {
  switch (Chosen()) {
    case Isa::kAvx512:
      return internal::SgdAvx512(r);
    case Isa::kAvx2:
      return internal::SgdAvx2(r);
    default:
      return internal::SgdScalar(r, 0);
  }
}

namespace {

const void* Advance(const void* p, DType t, int64_t n) {
  return p ? static_cast<const char*>(p) + n * DTypeSize(t) : nullptr;
}
void* Advance(void* p, DType t, int64_t n) {
  return p ? static_cast<char*>(p) + n * DTypeSize(t) : nullptr;
}

// Calls f on each thread's share [begin, begin + n) of the run, made by cut(begin, n).
template <class Cut, class F>
void OverThreads(int64_t total, Cut cut, F f) {
  if (total <= (1 << 15)) return f(cut(0, total));
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = ((total + threads - 1) / threads + 63) / 64 * 64;
    const int64_t begin = std::min(total, t * per), end = std::min(total, begin + per);
    if (begin < end) f(cut(begin, end - begin));
  }
}

}  // namespace

void AdamUpdateThreaded(const AdamRun& r) {
  auto cut = [&r](int64_t b, int64_t n) {
    AdamRun s = r;
    s.p += b;
    s.m += b;
    s.v += b;
    s.g = Advance(r.g, r.gt, b);
    s.model = Advance(r.model, r.gt, b);
    s.n = n;
    return s;
  };
  OverThreads(r.n, cut, [](const AdamRun& s) { AdamUpdate(s); });
}

void SgdUpdateThreaded(const SgdRun& r) {
  auto cut = [&r](int64_t b, int64_t n) {
    SgdRun s = r;
    s.p += b;
    if (s.buf) s.buf += b;
    s.g = Advance(r.g, r.gt, b);
    s.model = Advance(r.model, r.gt, b);
    s.n = n;
    return s;
  };
  OverThreads(r.n, cut, [](const SgdRun& s) { SgdUpdate(s); });
}

const char* CpuAdamIsa() {
  switch (Chosen()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace ds
