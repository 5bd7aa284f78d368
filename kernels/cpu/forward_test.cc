// Forward values of the CPU fp32 ops against direct (double precision) reference
// implementations on small shapes. Attention and rope: attention_forward_test.cc;
// shape-inference errors: infer_test.cc.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/op_test_util.h"

namespace ds::kernels {
namespace {

using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;

// Runs `op` on `inputs` and returns the harness (outputs, saved) after a passing forward.
template <typename... T>
OpHarness Run(const std::string& op, Attrs attrs, T&&... inputs) {
  OpHarness h(op, std::move(attrs));
  (h.inputs.push_back(std::forward<T>(inputs)), ...);
  Status s = h.Forward();
  INFO(s.ToString());
  REQUIRE(s.ok());
  return h;
}

double Gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_CASE("forward: gelu matches known values and the tanh formula", "[kernels][forward]") {
  const std::vector<float> xs = {0.f, 1.f, -1.f, 2.f, -3.f, 0.5f};
  const std::vector<double> known = {0.0,          0.8411919906,  -0.1588080094,
                                     1.9545976941, -0.0036373921, 0.3457140098};
  OwnedTensor x({6});
  for (int i = 0; i < 6; ++i) x.f32()[i] = xs[i];
  OpHarness h = Run("gelu", {}, std::move(x));
  for (int i = 0; i < 6; ++i) CHECK(h.outputs[0].f32()[i] == Approx(known[i]).margin(1e-6));

  std::mt19937 rng(1);
  OpHarness r = Run("gelu", {}, RandomTensor({1000}, rng, -10, 10));
  for (int i = 0; i < 1000; ++i)
    CHECK(r.outputs[0].f32()[i] == Approx(Gelu(r.inputs[0].f32()[i])).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("forward: silu, add, mul", "[kernels][forward]") {
  std::mt19937 rng(2);
  OpHarness s = Run("silu", {}, RandomTensor({777}, rng, -20, 20));
  for (int i = 0; i < 777; ++i) {
    const double x = s.inputs[0].f32()[i];
    CHECK(s.outputs[0].f32()[i] == Approx(x / (1 + std::exp(-x))).epsilon(1e-5).margin(1e-6));
  }
  OpHarness a = Run("add", {}, RandomTensor({3, 5}, rng), RandomTensor({3, 5}, rng));
  OpHarness m = Run("mul", {}, RandomTensor({3, 5}, rng), RandomTensor({3, 5}, rng));
  for (int i = 0; i < 15; ++i) {
    CHECK(a.outputs[0].f32()[i] == a.inputs[0].f32()[i] + a.inputs[1].f32()[i]);
    CHECK(m.outputs[0].f32()[i] == m.inputs[0].f32()[i] * m.inputs[1].f32()[i]);
  }
}

TEST_CASE("forward: layernorm and rmsnorm match the direct formula", "[kernels][forward]") {
  std::mt19937 rng(3);
  const int n = 6, c = 50;
  Attrs eps;
  eps.SetFloat("eps", 1e-5);
  OpHarness ln = Run("layernorm", eps, RandomTensor({2, 3, c}, rng, -3, 5), RandomTensor({c}, rng),
                     RandomTensor({c}, rng));
  OpHarness rms = Run("rmsnorm", eps, RandomTensor({n, c}, rng, -3, 5), RandomTensor({c}, rng));
  for (int r = 0; r < n; ++r) {
    const float* x = ln.inputs[0].f32() + r * c;
    double mean = 0, var = 0, ss = 0;
    for (int j = 0; j < c; ++j) mean += x[j] / c;
    for (int j = 0; j < c; ++j) var += (x[j] - mean) * (x[j] - mean) / c;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    CHECK(ln.saved[0].f32()[r] == Approx(mean).margin(1e-5));
    CHECK(ln.saved[1].f32()[r] == Approx(rstd).epsilon(1e-5));
    for (int j = 0; j < c; ++j) {
      const double want = (x[j] - mean) * rstd * ln.inputs[1].f32()[j] + ln.inputs[2].f32()[j];
      CHECK(ln.outputs[0].f32()[r * c + j] == Approx(want).epsilon(1e-5).margin(1e-5));
    }
    const float* xr = rms.inputs[0].f32() + r * c;
    for (int j = 0; j < c; ++j) ss += static_cast<double>(xr[j]) * xr[j] / c;
    const double rms_rstd = 1 / std::sqrt(ss + 1e-5);
    for (int j = 0; j < c; ++j) {
      const double want = xr[j] * rms_rstd * rms.inputs[1].f32()[j];
      CHECK(rms.outputs[0].f32()[r * c + j] == Approx(want).epsilon(1e-5).margin(1e-5));
    }
  }
}

TEST_CASE("forward: linear matches a naive matmul", "[kernels][forward]") {
  std::mt19937 rng(4);
  const int n = 10, in = 13, out = 7;
  for (bool bias : {false, true}) {
    OpHarness h("linear", {});
    h.inputs.push_back(RandomTensor({2, 5, in}, rng));
    h.inputs.push_back(RandomTensor({out, in}, rng));
    if (bias) h.inputs.push_back(RandomTensor({out}, rng));
    REQUIRE(h.Forward().ok());
    REQUIRE(h.outputs[0].view().shape() == Shape{2, 5, out});
    for (int i = 0; i < n; ++i)
      for (int o = 0; o < out; ++o) {
        double want = bias ? h.inputs[2].f32()[o] : 0.0;
        for (int k = 0; k < in; ++k)
          want +=
              static_cast<double>(h.inputs[0].f32()[i * in + k]) * h.inputs[1].f32()[o * in + k];
        CHECK(h.outputs[0].f32()[i * out + o] == Approx(want).epsilon(1e-5).margin(1e-5));
      }
  }
}

TEST_CASE("forward: embedding and position_embedding", "[kernels][forward]") {
  std::mt19937 rng(5);
  OpHarness e =
      Run("embedding", {}, IntTensor({2, 3}, {4, 0, 4, 2, 1, 3}), RandomTensor({5, 8}, rng));
  REQUIRE(e.outputs[0].view().shape() == Shape{2, 3, 8});
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j)
      CHECK(e.outputs[0].f32()[i * 8 + j] == e.inputs[1].f32()[e.inputs[0].i32()[i] * 8 + j]);

  OpHarness bad("embedding", {});
  bad.inputs.push_back(IntTensor({1, 3}, {0, 5, 1}));
  bad.inputs.push_back(RandomTensor({5, 8}, rng));
  Status s = bad.Forward();
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("token id 5") && Catch::Contains("V=5"));

  OpHarness p =
      Run("position_embedding", {}, RandomTensor({2, 3, 4}, rng), RandomTensor({6, 4}, rng));
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 4; ++j) {
        const int i = (b * 3 + t) * 4 + j;
        CHECK(p.outputs[0].f32()[i] == p.inputs[0].f32()[i] + p.inputs[1].f32()[t * 4 + j]);
      }
}

TEST_CASE("forward: cross_entropy matches a direct log-softmax", "[kernels][forward]") {
  std::mt19937 rng(6);
  const int n = 6, v = 300;  // V spans more than one 256-wide chunk
  const std::vector<int32_t> targets = {5, -100, 299, 0, -100, 17};
  OpHarness h =
      Run("cross_entropy", {}, RandomTensor({2, 3, v}, rng, -8, 8), IntTensor({2, 3}, targets));
  double total = 0;
  int count = 0;
  for (int r = 0; r < n; ++r) {
    if (targets[r] == -100) continue;
    const float* x = h.inputs[0].f32() + r * v;
    double sum = 0;
    for (int j = 0; j < v; ++j) sum += std::exp(static_cast<double>(x[j]));
    CHECK(h.saved[0].f32()[r] == Approx(std::log(sum)).epsilon(1e-6));
    total += std::log(sum) - x[targets[r]];
    ++count;
  }
  CHECK(h.outputs[0].f32()[0] == Approx(total / count).epsilon(1e-5));

  SECTION("all ignored gives 0") {
    OpHarness z =
        Run("cross_entropy", {}, RandomTensor({1, 2, 4}, rng), IntTensor({1, 2}, {-100, -100}));
    CHECK(z.outputs[0].f32()[0] == 0.f);
  }
  SECTION("out-of-range target is an error") {
    OpHarness bad("cross_entropy", {});
    bad.inputs.push_back(RandomTensor({1, 2, 4}, rng));
    bad.inputs.push_back(IntTensor({1, 2}, {1, 4}));
    Status s = bad.Forward();
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains("target 4") && Catch::Contains("V=4"));
  }
}

TEST_CASE("forward: dropout", "[kernels][forward]") {
  std::mt19937 rng(7);
  Attrs attrs;
  attrs.SetFloat("p", 0.25);
  const int n = 100000;
  OwnedTensor x = RandomTensor({n}, rng, 1, 2);  // never 0, so dropped == 0 exactly
  auto run = [&](uint64_t seed, bool training, const Attrs& a) {
    OpHarness h("dropout", a);
    h.inputs.push_back(testing::CopyOf(x.view()));
    h.seed = seed;
    h.training = training;
    REQUIRE(h.Forward().ok());
    return h;
  };
  OpHarness a = run(42, true, attrs);
  OpHarness b = run(42, true, attrs);
  OpHarness c = run(43, true, attrs);
  int kept = 0, same_as_c = 0;
  for (int i = 0; i < n; ++i) {
    const float y = a.outputs[0].f32()[i];
    REQUIRE(y == b.outputs[0].f32()[i]);  // same seed, same mask
    if (y != 0.f) {
      ++kept;
      CHECK(y == Approx(x.f32()[i] / 0.75f));
    }
    same_as_c += (y != 0.f) == (c.outputs[0].f32()[i] != 0.f);
  }
  CHECK(kept == Approx(0.75 * n).margin(0.01 * n));
  CHECK(same_as_c < n - 1000);  // a different seed gives a different mask

  OpHarness eval = run(42, false, attrs);
  OpHarness p0 = run(42, true, Attrs());
  for (int i = 0; i < n; ++i) {
    REQUIRE(eval.outputs[0].f32()[i] == x.f32()[i]);
    REQUIRE(p0.outputs[0].f32()[i] == x.f32()[i]);
  }
}

}  // namespace
}  // namespace ds::kernels
