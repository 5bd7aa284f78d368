// reward_pair_loss against its formula on fixed scores (each row scored at its own marked
// position, others ignored), and its refusals: a row with no or two marked positions, an odd
// batch. The gradient is checked by finite differences in gradcheck_test.cc.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"

namespace ds::kernels {
namespace {

using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;

TEST_CASE("reward_pair_loss: the mean of -log sigmoid(chosen - rejected)", "[kernels][reward]") {
  std::mt19937 rng(5);
  OpHarness h("reward_pair_loss", Attrs());
  h.inputs.push_back(RandomTensor({4, 3, 1}, rng, -3, 3));
  h.inputs.push_back(IntTensor({4, 3}, {0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0}));
  REQUIRE(h.Forward().ok());
  const float* v = h.inputs[0].f32();
  const double d0 = double(v[1]) - v[6], d1 = double(v[5]) - v[10];  // rows 0-2, 1-3
  const double want = (std::log1p(std::exp(-d0)) + std::log1p(std::exp(-d1))) / 2;
  CHECK(h.outputs[0].f32()[0] == Approx(want).epsilon(1e-6));
  // Far apart scores stay finite: softplus computed stably.
  h.inputs[0].f32()[1] = 60.f, h.inputs[0].f32()[6] = -60.f;
  h.inputs[0].f32()[5] = -60.f, h.inputs[0].f32()[10] = 60.f;
  REQUIRE(h.Forward().ok());
  CHECK(h.outputs[0].f32()[0] == Approx(60.0).epsilon(1e-5));  // (0 + 120) / 2
}

TEST_CASE("reward_pair_loss: one scored position per row, pairs only", "[kernels][reward]") {
  std::mt19937 rng(6);
  OpHarness none("reward_pair_loss", Attrs());
  none.inputs.push_back(RandomTensor({2, 2, 1}, rng));
  none.inputs.push_back(IntTensor({2, 2}, {1, 0, 0, 0}));
  auto s = none.Forward();
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("row 1 marks no scored position"));
  OpHarness two("reward_pair_loss", Attrs());
  two.inputs.push_back(RandomTensor({2, 2, 1}, rng));
  two.inputs.push_back(IntTensor({2, 2}, {1, 1, 0, 1}));
  REQUIRE_FALSE(two.Forward().ok());
  OpHarness odd("reward_pair_loss", Attrs());
  odd.inputs.push_back(RandomTensor({3, 1, 1}, rng));
  odd.inputs.push_back(IntTensor({3, 1}, {1, 1, 1}));
  s = odd.Forward();
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("a batch of 3 rows"));
  const OpDef* def = FindOp("reward_pair_loss");
  REQUIRE(def);
  std::vector<TensorSpec> out;
  CHECK_FALSE(def->infer(Attrs(), {{{4, 2, 2}, DType::kF32}, {{4, 2}, DType::kI32}}, &out).ok());
  CHECK(def->infer(Attrs(), {{{4, 2, 1}, DType::kF32}, {{4, 2}, DType::kI32}}, &out).ok());
}

}  // namespace
}  // namespace ds::kernels
