#include "runtime/core/cpu_adam.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/core/cpu_adam_simd.h"
#include "tests/testing/skipped.h"

namespace ds {
namespace {

bool HasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("fma");
}
bool HasAvx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

// The SIMD paths this CPU runs; each one it lacks is reported as a skipped case, once per test.
template <typename Fn>
std::vector<Fn> SimdPaths(const char* what, Fn avx2, Fn avx512) {
  std::vector<Fn> paths;
  if (HasAvx2())
    paths.push_back(avx2);
  else
    testing::ReportSkippedCase(std::string(what) + " AVX2 path", "the CPU lacks avx2/f16c/fma");
  if (HasAvx512())
    paths.push_back(avx512);
  else
    testing::ReportSkippedCase(std::string(what) + " AVX-512 path", "the CPU lacks avx512f/bw");
  return paths;
}

// One Adam problem: master, moments, gradient (in dtype t) and the 16-bit copy.
struct State {
  std::vector<float> p, m, v;
  std::vector<uint16_t> g16, model;
  std::vector<float> g32;
  DType t;
  State(int64_t n, DType dtype, uint32_t seed)
      : p(n), m(n), v(n), g16(n), model(n), g32(n), t(dtype) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = d(rng);
      m[i] = 0.1f * d(rng);
      v[i] = std::abs(0.01f * d(rng));
      g32[i] = d(rng) * (i % 97 == 0 ? 1e4f : 1.f);  // some large ones (f16 overflow)
      if (i % 101 == 5) g32[i] = std::numeric_limits<float>::quiet_NaN();
      StoreFloat(g16.data(), t == DType::kF32 ? DType::kBF16 : t, i, g32[i]);
    }
  }
  AdamRun Run(bool with_model) {
    AdamRun r{p.data(),
              m.data(),
              v.data(),
              t == DType::kF32 ? static_cast<const void*>(g32.data()) : g16.data(),
              with_model && t != DType::kF32 ? model.data() : nullptr,
              t,
              static_cast<int64_t>(p.size())};
    r.grad_scale = 0.5f;
    r.l2 = 0.01f;
    r.b1 = 0.9f;
    r.b2 = 0.999f;
    r.eps = 1e-8f;
    r.step_size = 1e-3f / 0.1f;
    r.inv_sqrt_bc2 = 1.0f / std::sqrt(0.001f);
    r.decay = 1.0f - 1e-3f * 0.1f;
    return r;
  }
  bool operator==(const State& o) const {
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    return same(p, o.p) && same(m, o.m) && same(v, o.v) && same(model, o.model);
  }
};

TEST_CASE("cpu_adam: AVX-512, AVX2, scalar and threaded give the same bits", "[cpu_adam]") {
  INFO("this CPU runs " << CpuAdamIsa());
  const auto simd = SimdPaths("cpu_adam Adam", &internal::AdamAvx2, &internal::AdamAvx512);
  int compared = 0;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t n :
         {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{1001}, int64_t{70001}})
      for (bool with_model : {false, true}) {
        INFO("dtype " << DTypeName(t) << " n " << n << " model " << with_model);
        State ref(n, t, 11);
        for (int step = 0; step < 3; ++step) internal::AdamScalar(ref.Run(with_model), 0);
        std::vector<void (*)(const AdamRun&)> paths = {AdamUpdateThreaded};
        paths.insert(paths.end(), simd.begin(), simd.end());
        for (auto path : paths) {
          State s(n, t, 11);
          for (int step = 0; step < 3; ++step) path(s.Run(with_model));
          CHECK(s == ref);
          ++compared;
        }
      }
  CHECK(compared == 36 * (1 + static_cast<int>(simd.size())));
}

TEST_CASE("cpu_adam: the update is AdamW's arithmetic (against fp64)", "[cpu_adam]") {
  State s(4096, DType::kF32, 3);
  State start = s;
  AdamRun r = s.Run(false);
  AdamUpdate(r);
  double worst = 0;
  for (int64_t i = 0; i < 4096; ++i) {
    if (std::isnan(start.g32[i])) continue;
    const double g = double(start.g32[i]) * r.grad_scale + double(r.l2) * start.p[i];
    const double m = double(r.b1) * start.m[i] + (1.0 - double(r.b1)) * g;
    const double v = double(r.b2) * start.v[i] + (1.0 - double(r.b2)) * g * g;
    const double p = double(start.p[i]) * r.decay -
                     double(r.step_size) * m / (std::sqrt(v) * r.inv_sqrt_bc2 + r.eps);
    worst = std::max(worst, std::abs(p - s.p[i]) / std::max(1e-3, std::abs(p)));
  }
  CHECK(worst < 1e-5);
}

TEST_CASE("cpu_adam: SGD paths agree to the bit, with and without momentum", "[cpu_adam]") {
  const auto simd = SimdPaths("cpu_adam SGD", &internal::SgdAvx2, &internal::SgdAvx512);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    for (bool momentum : {false, true}) {
      auto run = [&](void (*f)(const SgdRun&)) {
        State s(70001, t, 5);
        for (int step = 0; step < 3; ++step) {
          SgdRun r{s.p.data(),
                   momentum ? s.m.data() : nullptr,
                   t == DType::kF32 ? static_cast<const void*>(s.g32.data()) : s.g16.data(),
                   t == DType::kF32 ? nullptr : s.model.data(),
                   t,
                   static_cast<int64_t>(s.p.size())};
          r.grad_scale = 0.25f;
          r.wd = 0.01f;
          r.mu = 0.9f;
          r.lr = 0.1f;
          r.first = step == 0;
          f(r);
        }
        return s;
      };
      const State ref = run([](const SgdRun& r) { internal::SgdScalar(r, 0); });
      CHECK(run(SgdUpdateThreaded) == ref);
      for (auto path : simd) CHECK(run(path) == ref);
    }
}

}  // namespace
}  // namespace ds
