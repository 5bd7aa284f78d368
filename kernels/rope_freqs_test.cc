// RopeInvFreq against the values transformers' ROPE_INIT_FUNCTIONS give (models-and-data.md
// section 2's anchors, head size 128 and 16), and the checks of ReadRopeParams.
#include "kernels/rope_freqs.h"

#include <catch2/catch.hpp>

namespace ds::kernels {
namespace {

RopeParams Params(const char* type, double theta, int64_t dim) {
  RopeParams p;
  p.type = type;
  p.theta = theta;
  p.rotary_dim = dim;
  return p;
}

TEST_CASE("rope frequencies: llama3 and yarn at transformers' anchors", "[kernels][rope]") {
  RopeParams llama3 = Params("llama3", 5e5, 128);
  llama3.factor = 8, llama3.low_freq_factor = 1, llama3.high_freq_factor = 4;
  llama3.original_max = 8192;
  const std::vector<float> f = RopeInvFreq(llama3, 1);
  REQUIRE(f.size() == 64);
  const std::pair<int, double> anchors[] = {{0, 1.0},          {20, 1.656044e-2},
                                            {40, 3.428102e-5}, {45, 1.229764e-5},
                                            {50, 4.411535e-6}, {63, 3.068926e-7}};
  for (auto [i, v] : anchors) CHECK(f[i] == Approx(v).epsilon(2e-6));

  RopeParams yarn = Params("yarn", 1e6, 128);
  yarn.factor = 4, yarn.original_max = 32768;
  const std::vector<float> y = RopeInvFreq(yarn, 1);
  const std::pair<int, double> yarn_anchors[] = {{0, 1.0},          {20, 1.333521e-2},
                                                 {40, 4.445699e-5}, {45, 1.510741e-5},
                                                 {50, 5.133812e-6}, {63, 3.102344e-7}};
  for (auto [i, v] : yarn_anchors) CHECK(y[i] == Approx(v).epsilon(2e-6));
}

TEST_CASE("rope frequencies: linear, dynamic and partial rotary", "[kernels][rope]") {
  RopeParams linear = Params("linear", 1e4, 16);
  linear.factor = 2;
  const std::vector<float> f = RopeInvFreq(linear, 1);
  CHECK(f[0] == Approx(0.5));
  CHECK(f[1] == Approx(0.158114).epsilon(1e-5));
  CHECK(f[2] == Approx(0.05).epsilon(1e-6));
  RopeParams dynamic = Params("dynamic", 1e4, 16);
  dynamic.factor = 2, dynamic.max_positions = 4096;
  const std::vector<float> at_m = RopeInvFreq(dynamic, 100);  // S <= M: plain RoPE
  const std::vector<float> plain = RopeInvFreq(Params("default", 1e4, 16), 1);
  CHECK(at_m == plain);
  const std::vector<float> d = RopeInvFreq(dynamic, 8192);
  const double expected[] = {1.0, 0.270296, 0.07306, 0.019748};
  for (int i = 0; i < 4; ++i) CHECK(d[i] == Approx(expected[i]).epsilon(1e-5));
  CHECK(RopeInvFreq(Params("default", 1e4, 4), 1).size() == 2);  // 4 rotary dims: 2 pairs
}

TEST_CASE("rope frequencies: bad parameters are named", "[kernels][rope]") {
  Attrs a;
  RopeParams p;
  a.SetString("rope_type", "su");
  CHECK(ReadRopeParams(a, 16, &p).message().find("rope_type \"su\"") != std::string::npos);
  a.SetString("rope_type", "yarn");
  a.SetFloat("factor", 4);
  CHECK(ReadRopeParams(a, 16, &p).message().find("yarn needs original_max") != std::string::npos);
  a.SetInt("original_max", 32);
  CHECK(ReadRopeParams(a, 16, &p).ok());
  a.SetInt("rotary_dim", 18);
  CHECK(ReadRopeParams(a, 16, &p).message().find("rotary_dim 18") != std::string::npos);
}

}  // namespace
}  // namespace ds::kernels
