// MoE gating golden tests (capacity edges, drop order, random token selection, top-2
// renormalisation, the aux loss against its formula, capacity without drops) and the data path
// (dispatch -> expert_linear -> combine) against a per-token reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/cpu/op_test_util.h"
#include "kernels/moe_capacity.h"

namespace ds::kernels {
namespace {

using testing::FloatTensor;
using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;

Attrs Gating(int64_t experts, int64_t k, double factor, int64_t min_capacity, int64_t drop) {
  Attrs a;
  a.SetInt("num_experts", experts);
  a.SetInt("top_k", k);
  a.SetFloat("capacity_factor", factor);
  a.SetFloat("eval_capacity_factor", factor);
  a.SetInt("min_capacity", min_capacity);
  a.SetInt("drop_tokens", drop);
  return a;
}

struct Routed {
  std::vector<int32_t> routes;
  std::vector<float> weights;
  float aux = 0, capacity = 0;
};

Routed Route(const Attrs& a, OwnedTensor logits, uint64_t seed = 1, bool training = true) {
  OpHarness h("moe_router", a);
  h.inputs.push_back(std::move(logits));
  h.seed = seed;
  h.training = training;
  REQUIRE(h.Forward().ok());
  Routed r;
  r.routes.assign(h.outputs[0].i32(), h.outputs[0].i32() + h.outputs[0].numel());
  r.weights.assign(h.outputs[1].f32(), h.outputs[1].f32() + h.outputs[1].numel());
  r.aux = h.outputs[2].f32()[0];
  r.capacity = h.outputs[3].f32()[0];
  return r;
}

// n tokens that all prefer `expert` (logit 2 against 0).
OwnedTensor AllTo(int64_t n, int64_t experts, int64_t expert) {
  std::vector<float> v(n * experts, 0.f);
  for (int64_t t = 0; t < n; ++t) v[t * experts + expert] = 2.f;
  return FloatTensor({n, experts}, v);
}

TEST_CASE("moe capacity follows DeepSpeed's formula at its edges", "[kernels][moe]") {
  auto cap = [](int64_t tokens, int64_t e, int64_t k, double f, int64_t min_c) {
    return MoeCapacity(MoeGatingFrom(Gating(e, k, f, min_c, 1)), tokens, true);
  };
  CHECK(cap(8, 4, 1, 1.0, 0) == 2);   // exact quotient
  CHECK(cap(8, 4, 1, 1.25, 0) == 3);  // ceil(2.5)
  CHECK(cap(8, 4, 1, 1.0, 4) == 4);   // min_capacity wins
  CHECK(cap(8, 4, 2, 1.0, 0) == 4);   // top-2 doubles the factor
  CHECK(cap(10, 3, 1, 1.0, 0) == 4);  // ceil(3.33)
  CHECK(cap(3, 8, 1, 1.0, 0) == 1);   // fewer tokens than experts
  Attrs eval = Gating(4, 1, 1.0, 0, 1);
  eval.SetFloat("eval_capacity_factor", 2.0);
  CHECK(MoeCapacity(MoeGatingFrom(eval), 8, false) == 4);
  CHECK(MoeBufferCapacity(MoeGatingFrom(eval), 8) == 4);
  CHECK(MoeBufferCapacity(MoeGatingFrom(Gating(4, 2, 1.0, 0, 0)), 8) == 8);  // no drops
}

TEST_CASE("moe top-1 drops by token order, or by random score while training", "[kernels][moe]") {
  Attrs a = Gating(4, 1, 1.0, 2, 1);  // 6 tokens / 4 experts -> ceil(1.5) = 2
  a.SetInt("use_rts", 0);
  const Routed r = Route(a, AllTo(6, 4, 2));
  CHECK(r.capacity == 2);
  const int64_t buffer = 2;
  CHECK(r.routes == std::vector<int32_t>{2 * buffer + 0, 2 * buffer + 1, -1, -1, -1, -1});
  const float g = std::exp(2.f) / (std::exp(2.f) + 3);
  CHECK(r.weights[0] == Approx(g).epsilon(1e-6));
  CHECK(r.weights[2] == 0.f);

  a.SetInt("use_rts", 1);
  std::set<std::vector<int32_t>> seen;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const Routed s = Route(a, AllTo(6, 4, 2), seed);
    CHECK(s.routes == Route(a, AllTo(6, 4, 2), seed).routes);  // reproducible
    std::vector<int32_t> kept;
    for (int32_t v : s.routes)
      if (v >= 0) kept.push_back(v);
    CHECK(kept == std::vector<int32_t>{4, 5});  // positions follow token order
    seen.insert(s.routes);
  }
  CHECK(seen.size() > 1);  // the seed chooses which tokens survive
  // Evaluation keeps the first tokens, whatever the seed.
  CHECK(Route(a, AllTo(6, 4, 2), 3, false).routes == r.routes);
}

TEST_CASE("moe top-2 places second choices after first ones and renormalises", "[kernels][moe]") {
  // 4 tokens, 3 experts, capacity ceil(4/3 x 2) = 3.
  // First choices 0, 0, 1, 0; second choices 1, 2, 0, 1 (logits 3 > 1 > 0).
  const std::vector<float> v = {3, 1, 0, 3, 0, 1, 1, 3, 0, 3, 1, 0};
  Attrs a = Gating(3, 2, 1.0, 0, 1);
  a.SetString("second_expert", "argmax");
  const Routed r = Route(a, FloatTensor({4, 3}, v));
  REQUIRE(r.capacity == 3);
  const int32_t b = 3;  // buffer capacity
  // Expert 0: first choices t0, t1, t3 at 0, 1, 2; t2's second choice would be 3: dropped.
  // Expert 1: t2 first at 0; t0 second at 1 + 1 = 1... second choices start after expert 1's
  // single first choice: t0 at 1, t3 at 2. Expert 2: t1 second at 0.
  CHECK(r.routes == std::vector<int32_t>{0, b + 1, 1, 2 * b + 0, b + 0, -1, 2, b + 2});
  const float big = std::exp(3.f), mid = std::exp(1.f), s = big + mid + 1;
  CHECK(r.weights[0] == Approx(big / (big + mid)).epsilon(1e-6));
  CHECK(r.weights[1] == Approx(mid / (big + mid)).epsilon(1e-6));
  CHECK(r.weights[4] == Approx(1.0).epsilon(1e-6));  // t2: only its first choice survived
  CHECK(r.weights[5] == 0.f);
  // aux = E sum_e me_e ce_e with ce from the first choices (3, 1, 0 of 4).
  double me[3] = {0, 0, 0};
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < 3; ++e) {
      const double x = v[t * 3 + e];
      me[e] += std::exp(x) / s / 4;
    }
  const double aux = 3 * (me[0] * 0.75 + me[1] * 0.25 + me[2] * 0.0);
  CHECK(r.aux == Approx(aux).epsilon(1e-6));
}

TEST_CASE("moe without drops: the capacity is the busiest expert's count", "[kernels][moe]") {
  const Routed r1 = Route(Gating(4, 1, 1.0, 4, 0), AllTo(7, 4, 1));
  CHECK(r1.capacity == 7);
  for (int t = 0; t < 7; ++t) CHECK(r1.routes[t] == 1 * 7 + t);
  Attrs a = Gating(3, 2, 1.0, 0, 0);
  a.SetString("second_expert", "argmax");
  const std::vector<float> v = {3, 1, 0, 3, 0, 1, 1, 3, 0, 3, 1, 0};
  const Routed r2 = Route(a, FloatTensor({4, 3}, v));
  CHECK(r2.capacity == 4);  // expert 0: three first choices and one second
  for (float w : r2.weights) CHECK(w > 0.f);
}

TEST_CASE("moe second expert sampling is seeded and stays off the first", "[kernels][moe]") {
  std::mt19937 rng(3);
  OwnedTensor logits = RandomTensor({64, 8}, rng, -1, 1);
  Attrs a = Gating(8, 2, 4.0, 0, 1);
  const Routed x = Route(a, testing::CopyOf(logits.view()), 11);
  const Routed y = Route(a, testing::CopyOf(logits.view()), 11);
  const Routed z = Route(a, testing::CopyOf(logits.view()), 12);
  CHECK(x.routes == y.routes);
  CHECK(x.routes != z.routes);
  const int64_t buffer = MoeBufferCapacity(MoeGatingFrom(a), 64);
  for (int t = 0; t < 64; ++t)
    if (x.routes[2 * t] >= 0 && x.routes[2 * t + 1] >= 0)
      CHECK(x.routes[2 * t] / buffer != x.routes[2 * t + 1] / buffer);
}

// dispatch -> expert_linear -> combine against sum_i w_i (x W_e^T + b_e) per token, with a step
// capacity below the buffer's (no drops) and with drops.
void CheckDataPath(int64_t drop) {
  std::mt19937 rng(5);
  const int64_t n = 12, e = 4, c = 6, f = 5;
  Attrs a = Gating(e, 2, drop ? 0.5 : 1.0, 0, drop);
  OpHarness router("moe_router", a);
  router.inputs.push_back(RandomTensor({1, n, e}, rng, -2, 2));
  REQUIRE(router.Forward().ok());
  OwnedTensor x = RandomTensor({1, n, c}, rng), w = RandomTensor({e, f, c}, rng);
  OwnedTensor bias = RandomTensor({e, f}, rng);
  OpHarness dispatch("moe_dispatch", a);
  dispatch.inputs.push_back(testing::CopyOf(x.view()));
  dispatch.inputs.push_back(testing::CopyOf(router.outputs[0].view()));
  dispatch.inputs.push_back(testing::CopyOf(router.outputs[3].view()));
  REQUIRE(dispatch.Forward().ok());
  OpHarness expert("expert_linear", {});
  expert.inputs.push_back(testing::CopyOf(dispatch.outputs[0].view()));
  expert.inputs.push_back(testing::CopyOf(router.outputs[3].view()));
  expert.inputs.push_back(testing::CopyOf(w.view()));
  expert.inputs.push_back(testing::CopyOf(bias.view()));
  REQUIRE(expert.Forward().ok());
  OpHarness combine("moe_combine", {});
  combine.inputs.push_back(testing::CopyOf(expert.outputs[0].view()));
  combine.inputs.push_back(testing::CopyOf(router.outputs[0].view()));
  combine.inputs.push_back(testing::CopyOf(router.outputs[1].view()));
  combine.inputs.push_back(testing::CopyOf(router.outputs[3].view()));
  REQUIRE(combine.Forward().ok());
  const int64_t buffer = dispatch.outputs[0].view().dim(1);
  int dropped = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < f; ++j) {
      double want = 0;
      for (int i = 0; i < 2; ++i) {
        const int32_t r = router.outputs[0].i32()[t * 2 + i];
        if (r < 0) {
          dropped += j == 0;
          continue;
        }
        const int64_t ex = r / buffer;
        double y = bias.f32()[ex * f + j];
        for (int64_t k = 0; k < c; ++k)
          y += double(x.f32()[t * c + k]) * w.f32()[(ex * f + j) * c + k];
        want += router.outputs[1].f32()[t * 2 + i] * y;
      }
      CHECK(combine.outputs[0].f32()[t * f + j] == Approx(want).margin(1e-5));
    }
  if (drop) CHECK(dropped > 0);
  if (!drop) CHECK(router.outputs[3].f32()[0] < buffer);
}

TEST_CASE("moe data path equals the per-token reference", "[kernels][moe]") {
  SECTION("no drops, capacity below the buffer") { CheckDataPath(0); }
  SECTION("with drops") { CheckDataPath(1); }
}

TEST_CASE("moe ops refuse bad shapes and settings", "[kernels][moe]") {
  OpHarness h("moe_router", Gating(2, 3, 1.0, 0, 1));
  h.inputs.push_back(FloatTensor({4, 2}, std::vector<float>(8, 0.f)));
  std::vector<TensorSpec> out;
  Status s = h.Infer(&out);
  REQUIRE(!s.ok());
  CHECK(s.message().find("top_k 3") != std::string::npos);
  OpHarness g("moe_router", Gating(3, 1, 1.0, 0, 1));
  g.inputs.push_back(FloatTensor({4, 2}, std::vector<float>(8, 0.f)));
  s = g.Infer(&out);
  REQUIRE(!s.ok());
  CHECK(s.message().find("2 columns for 3 experts") != std::string::npos);
}

}  // namespace
}  // namespace ds::kernels
