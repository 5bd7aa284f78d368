// The host AdamW step (cpu_adam.h) on n parameters against the memory roofline of the same
// bytes, measured in the same run: a plain streaming loop that reads the gradient, master, m
// and v and writes master, m, v (and the 16-bit copy), doing nothing else. Prints the median of
// --steps steps for fp32 gradients (no copy) and for bf16 gradients with the bf16 copy.
//
//   bazel-bin/runtime/core/cpu_adam_bench [n=100000000] [steps=7]     (OMP_NUM_THREADS=2)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/core/cpu_adam.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double MedianSeconds(int steps, F f) {
  std::vector<double> t;
  f();  // warm-up: pages touched, caches and frequency settled
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Same bytes as the step, trivial arithmetic.
void Stream(float* p, float* m, float* v, const void* g, uint16_t* model, bool bf16, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = bf16 ? ds::Bf16ToFloat(static_cast<const uint16_t*>(g)[i])
                          : static_cast<const float*>(g)[i];
    p[i] += gi;
    m[i] += gi;
    v[i] += gi;
    if (model) {
      uint32_t u;
      std::memcpy(&u, &p[i], 4);
      model[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 100000000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 7;
  std::vector<float> p(n, 0.5f), m(n, 0.f), v(n, 0.f), g32(n, 1e-3f);
  std::vector<uint16_t> g16(n, ds::FloatToBf16(1e-3f)), model(n, 0);
  std::printf("cpu_adam_bench: %lld parameters, %d threads, %s kernels\n",
              static_cast<long long>(n), omp_get_max_threads(), ds::CpuAdamIsa());
  for (bool bf16 : {false, true}) {
    ds::AdamRun r{p.data(),
                  m.data(),
                  v.data(),
                  bf16 ? static_cast<const void*>(g16.data()) : g32.data(),
                  bf16 ? model.data() : nullptr,
                  bf16 ? ds::DType::kBF16 : ds::DType::kF32,
                  n};
    r.grad_scale = 1.0f;
    r.b1 = 0.9f;
    r.b2 = 0.999f;
    r.eps = 1e-8f;
    r.step_size = 1e-4f;
    r.inv_sqrt_bc2 = 1.0f;
    r.decay = 1.0f - 1e-5f;
    const double adam = MedianSeconds(steps, [&] { ds::AdamUpdateThreaded(r); });
    const double roof = MedianSeconds(steps, [&] {
      Stream(p.data(), m.data(), v.data(), r.g, bf16 ? model.data() : nullptr, bf16, n);
    });
    const double bytes = n * ((bf16 ? 2.0 : 4.0) + 12 + 12 + (bf16 ? 2 : 0));
    std::printf(
        "%-28s adamw %7.1f ms %5.2f Gparam/s  roofline %7.1f ms %5.2f Gparam/s "
        "(%.1f GB/s)  ratio %.2f\n",
        bf16 ? "bf16 grads + bf16 copy:" : "fp32 grads, no copy:", adam * 1e3, n / adam / 1e9,
        roof * 1e3, n / roof / 1e9, bytes / roof / 1e9, roof / adam);
  }
  return 0;
}
