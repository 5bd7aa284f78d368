// GPU test: multi-tensor AdamW / Adam against a CPU reference that follows
// zero/optimizer.cc line for line (three steps, bf16 and fp32 gradients, per-
// parameter weight decay, grad_scale, 16-bit model copy), the device global grad norm and
// overflow flag against a double-precision host sum, and the casts against dtype.h.
// Needs a GPU: without one it prints one SKIPPED line and exits 77 (README.md).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/cuda/device.h"
#include "tests/testing/test_values.h"

#if DS_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/optimizer_launch.h"
#include "tests/testing/device_copies.h"

namespace ds::kernels {
namespace {

using testing::Download;
using testing::Upload;

// zero/optimizer.cc StepAdam, on host floats.
void ReferenceStep(const std::vector<OptimizerParamRange>& params, std::vector<float>& p,
                   std::vector<float>& m, std::vector<float>& v, const std::vector<float>& g,
                   const AdamWStepParams& o) {
  float bc1 = 1.0f, bc2 = 1.0f;  // bias_correction false: the raw moments
  if (o.bias_correction) {
    bc1 = 1.0f - static_cast<float>(std::pow(o.beta1, static_cast<double>(o.step)));
    bc2 = 1.0f - static_cast<float>(std::pow(o.beta2, static_cast<double>(o.step)));
  }
  const float step_size = o.lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  for (const OptimizerParamRange& r : params) {
    const float wd = r.decay ? o.weight_decay : 0.0f;
    const float decay = o.decoupled ? 1.0f - o.lr * wd : 1.0f;
    const float l2 = o.decoupled ? 0.0f : wd;
    for (int64_t i = r.offset; i < r.offset + r.numel; ++i) {
      const float grad = g[i] * o.grad_scale + l2 * p[i];
      const float mi = o.beta1 * m[i] + (1.0f - o.beta1) * grad;
      const float vi = o.beta2 * v[i] + (1.0f - o.beta2) * grad * grad;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + o.eps);
    }
  }
}

// |got - ref| <= rel * (|ref| + floor) elementwise. `floor` is the size of the terms a value is
// summed from: where they nearly cancel (Adam's exp_avg under L2 decay: g * scale + wd * p),
// one fused multiply-add on the GPU against two roundings here moves the result by an ulp of
// the terms, not of the small sum.
void CheckClose(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                double rel, double floor = 1e-6) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]) / (std::fabs(ref[i]) + floor);
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  INFO(what << ": worst element " << at << " gpu " << got[at] << " cpu " << ref[at]);
  CHECK(worst <= rel);
}

// Parameters: a matrix over two segments plus change, a bias, a tiny gain.
const std::vector<OptimizerParamRange> kParams = {{0, kOptimizerChunk + 1234, true},
                                                  {kOptimizerChunk + 1234, 777, false},
                                                  {kOptimizerChunk + 2011, 5, false}};
const size_t kTotal = kOptimizerChunk + 2016;

template <typename G>
void RunAdam(bool decoupled, bool bias_correction = true) {
  std::vector<float> p = testing::RandomValues(kTotal, -1.f, 1.f, 1), m(kTotal, 0.f),
                     v(kTotal, 0.f);
  const std::vector<AdamWSegment> segs = SplitOptimizerSegments(kParams);
  AdamWSegment* d_segs = Upload(segs);
  float* d_p = Upload(p);
  float* d_m = Upload(m);
  float* d_v = Upload(v);
  G* d_g = nullptr;
  G* d_model = nullptr;
  REQUIRE(cudaMalloc(&d_g, kTotal * sizeof(G)) == cudaSuccess);
  REQUIRE(cudaMalloc(&d_model, kTotal * sizeof(G)) == cudaSuccess);
  AdamWStepParams o;
  o.lr = 1e-2f;
  o.weight_decay = 0.1f;
  o.grad_scale = 0.5f;
  o.decoupled = decoupled;
  o.bias_correction = bias_correction;
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> g = testing::RandomValues(kTotal, -2.f, 2.f, 100 + step);
    std::vector<G> g_dev(kTotal);
    for (size_t i = 0; i < kTotal; ++i) {
      if constexpr (sizeof(G) == 2) {
        g[i] = Bf16ToFloat(FloatToBf16(g[i]));
        const uint16_t bits = FloatToBf16(g[i]);
        std::memcpy(static_cast<void*>(&g_dev[i]), &bits, 2);
      } else {
        g_dev[i] = g[i];
      }
    }
    REQUIRE(cudaMemcpy(d_g, g_dev.data(), kTotal * sizeof(G), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    o.step = step;
    REQUIRE(LaunchAdamWStep(d_segs, segs.size(), d_p, d_m, d_v, d_g, d_model, o, nullptr) ==
            cudaSuccess);
    ReferenceStep(kParams, p, m, v, g, o);
  }
  CheckClose("master", Download(d_p, kTotal), p, 1e-5);
  // exp_avg's terms: (1 - beta1) * grad with |grad| up to 1 + 0.1 (scaled g plus L2 decay),
  // so up to 0.11: an ulp of them is ~7e-9, and three steps of roundings reach 1.4e-8 (seen
  // on an H200 at exp_avg -3.7e-4). A wrong formula moves exp_avg by ~1e-3.
  CheckClose("exp_avg", Download(d_m, kTotal), m, 1e-5, 1e-2);
  CheckClose("exp_avg_sq", Download(d_v, kTotal), v, 1e-5);
  // The model copy is the master rounded to G.
  const std::vector<float> master = Download(d_p, kTotal);
  const std::vector<G> model = Download(d_model, kTotal);
  for (size_t i = 0; i < kTotal; i += 97) {
    if constexpr (sizeof(G) == 2) {
      uint16_t bits;
      std::memcpy(&bits, &model[i], 2);
      CHECK(bits == FloatToBf16(master[i]));
    } else {
      CHECK(model[i] == master[i]);
    }
  }
  for (void* ptr : {static_cast<void*>(d_segs), static_cast<void*>(d_p), static_cast<void*>(d_m),
                    static_cast<void*>(d_v), static_cast<void*>(d_g), static_cast<void*>(d_model)})
    cudaFree(ptr);
}

TEST_CASE("CUDA AdamW matches the CPU optimizer (bf16 grads and model)", "[cuda][optim]") {
  RunAdam<__nv_bfloat16>(true);
}
TEST_CASE("CUDA AdamW matches the CPU optimizer (fp32 grads)", "[cuda][optim]") {
  RunAdam<float>(true);
}
TEST_CASE("CUDA Adam (L2, not decoupled) matches the CPU optimizer", "[cuda][optim]") {
  RunAdam<__nv_bfloat16>(false);
}
TEST_CASE("CUDA Adam and AdamW with bias_correction false match the CPU optimizer",
          "[cuda][optim]") {
  RunAdam<float>(true, false);
  RunAdam<__nv_bfloat16>(false, false);
}

TEST_CASE("device grad norm and overflow flag", "[cuda][optim]") {
  std::vector<float> g = testing::RandomValues(kTotal, -3.f, 3.f, 7);
  const std::vector<AdamWSegment> segs = SplitOptimizerSegments(kParams);
  AdamWSegment* d_segs = Upload(segs);
  float* d_g = Upload(g);
  double* workspace = nullptr;
  GradNormResult* d_result = nullptr;
  REQUIRE(cudaMalloc(&workspace, segs.size() * sizeof(double)) == cudaSuccess);
  REQUIRE(cudaMalloc(&d_result, sizeof(GradNormResult)) == cudaSuccess);
  const float inv_scale = 0.25f;
  double want = 0;
  for (float x : g) want += static_cast<double>(x * inv_scale) * (x * inv_scale);
  REQUIRE(LaunchGradSquaredNorm(d_segs, segs.size(), d_g, inv_scale, workspace, d_result,
                                nullptr) == cudaSuccess);
  GradNormResult r = Download(d_result, 1)[0];
  CHECK(r.sum_sq == Approx(want).epsilon(1e-12));
  CHECK(r.overflow == 0);
  // Deterministic: the same bits again.
  REQUIRE(LaunchGradSquaredNorm(d_segs, segs.size(), d_g, inv_scale, workspace, d_result,
                                nullptr) == cudaSuccess);
  CHECK(Download(d_result, 1)[0].sum_sq == r.sum_sq);
  for (float bad : {INFINITY, NAN}) {
    const float saved = g[kOptimizerChunk + 3];
    REQUIRE(cudaMemcpy(d_g + kOptimizerChunk + 3, &bad, 4, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(LaunchGradSquaredNorm(d_segs, segs.size(), d_g, inv_scale, workspace, d_result,
                                  nullptr) == cudaSuccess);
    CHECK(Download(d_result, 1)[0].overflow == 1);
    REQUIRE(cudaMemcpy(d_g + kOptimizerChunk + 3, &saved, 4, cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  cudaFree(d_segs);
  cudaFree(d_g);
  cudaFree(workspace);
  cudaFree(d_result);
}

TEST_CASE("device casts round like dtype.h", "[cuda][optim]") {
  std::vector<float> x = testing::RandomValues(100003, -70000.f, 70000.f, 9);
  x[0] = NAN;
  x[1] = 1e30f;
  float* d_x = Upload(x);
  __nv_bfloat16* d_b = nullptr;
  __half* d_h = nullptr;
  float* d_back = nullptr;
  REQUIRE(cudaMalloc(&d_b, x.size() * 2) == cudaSuccess);
  REQUIRE(cudaMalloc(&d_h, x.size() * 2) == cudaSuccess);
  REQUIRE(cudaMalloc(&d_back, x.size() * 4) == cudaSuccess);
  REQUIRE(LaunchCast(d_x, d_b, x.size(), nullptr) == cudaSuccess);
  REQUIRE(LaunchCast(d_x, d_h, x.size(), nullptr) == cudaSuccess);
  const std::vector<uint16_t> b = Download(reinterpret_cast<uint16_t*>(d_b), x.size());
  const std::vector<uint16_t> h = Download(reinterpret_cast<uint16_t*>(d_h), x.size());
  for (size_t i = 1; i < x.size(); ++i) {
    CHECK(b[i] == FloatToBf16(x[i]));
    CHECK(h[i] == FloatToF16(x[i]));
  }
  CHECK(std::isnan(Bf16ToFloat(b[0])));
  CHECK(std::isinf(F16ToFloat(h[1])));
  REQUIRE(LaunchCast(d_b, d_back, x.size(), nullptr) == cudaSuccess);
  const std::vector<float> back = Download(d_back, x.size());
  for (size_t i = 1; i < x.size(); ++i) CHECK(back[i] == Bf16ToFloat(b[i]));
  cudaFree(d_x);
  cudaFree(d_b);
  cudaFree(d_h);
  cudaFree(d_back);
}

}  // namespace
}  // namespace ds::kernels
#endif  // DS_HAVE_CUDA
