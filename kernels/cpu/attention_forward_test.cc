// Forward values of attention (against a naive full-softmax implementation) and rope
// (against the direct rotate_half formula), in double precision.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/cpu/op_test_util.h"

namespace ds::kernels {
namespace {

using testing::CopyOf;
using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head) {
  Attrs a;
  a.SetInt("n_head", n_head);
  a.SetInt("n_kv_head", n_kv_head);
  return a;
}

// Naive causal attention: the full [T, T] score matrix per (b, h), softmax in double.
void NaiveAttention(const float* qkv, int64_t b_size, int64_t t_size, int64_t h_size, int64_t hkv,
                    int64_t d, std::vector<double>* out, std::vector<double>* lse) {
  const int64_t row = (h_size + 2 * hkv) * d, group = h_size / hkv;
  out->assign(b_size * t_size * h_size * d, 0.0);
  lse->assign(b_size * h_size * t_size, 0.0);
  std::vector<double> s(t_size);
  for (int64_t b = 0; b < b_size; ++b)
    for (int64_t h = 0; h < h_size; ++h) {
      const int64_t kv = h / group;
      for (int64_t i = 0; i < t_size; ++i) {
        const float* q = qkv + (b * t_size + i) * row + h * d;
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv + (b * t_size + j) * row + (h_size + kv) * d;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * k[e];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
        (*lse)[(b * h_size + h) * t_size + i] = m + std::log(sum);
        double* o = out->data() + (b * t_size + i) * h_size * d + h * d;
        for (int64_t j = 0; j <= i; ++j) {
          const float* v = qkv + (b * t_size + j) * row + (h_size + hkv + kv) * d;
          const double p = std::exp(s[j] - m) / sum;
          for (int64_t e = 0; e < d; ++e) o[e] += p * v[e];
        }
      }
    }
}

void CheckAttention(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t d, uint32_t seed) {
  INFO("B=" << b << " T=" << t << " H=" << h << " Hkv=" << hkv << " D=" << d);
  std::mt19937 rng(seed);
  OpHarness op("attention", HeadAttrs(h, hkv));
  op.inputs.push_back(RandomTensor({b, t, (h + 2 * hkv) * d}, rng, -2, 2));
  REQUIRE(op.Forward().ok());
  REQUIRE(op.outputs[0].view().shape() == Shape{b, t, h * d});
  REQUIRE(op.saved[0].view().shape() == Shape{b, h, t});
  std::vector<double> out, lse;
  NaiveAttention(op.inputs[0].f32(), b, t, h, hkv, d, &out, &lse);
  double max_err = 0;
  for (size_t i = 0; i < out.size(); ++i)
    max_err = std::max(max_err, std::fabs(out[i] - op.outputs[0].f32()[i]));
  CHECK(max_err < 2e-5);
  for (size_t i = 0; i < lse.size(); ++i)
    REQUIRE(op.saved[0].f32()[i] == Approx(lse[i]).epsilon(1e-5).margin(1e-5));
}

TEST_CASE("forward: attention matches naive full-softmax attention", "[kernels][forward]") {
  SECTION("multi-head, one partial block") { CheckAttention(2, 5, 2, 2, 8, 1); }
  SECTION("GQA H=4 Hkv=2, T not a multiple of the block") { CheckAttention(2, 70, 4, 2, 16, 2); }
  SECTION("multi-query H=4 Hkv=1, three blocks") { CheckAttention(1, 150, 4, 1, 8, 3); }
  SECTION("exact blocks, D=64") { CheckAttention(1, 128, 2, 2, 64, 4); }
  SECTION("single thread gives the same result") {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    CheckAttention(2, 70, 4, 2, 16, 5);
    omp_set_num_threads(saved);
  }
}

// Left padding: a sequence behind k pad tokens (whatever they hold) gives, at its own tokens,
// what it gives alone; the pad tokens' rows stay finite.
TEST_CASE("forward: attention with left pads equals the unpadded sequence", "[kernels][forward]") {
  const int64_t t = 70, h = 4, hkv = 2, d = 8, row = (h + 2 * hkv) * d;
  std::mt19937 rng(9);
  OwnedTensor alone = RandomTensor({1, t, row}, rng, -2, 2);
  OpHarness one("attention", HeadAttrs(h, hkv));
  one.inputs.push_back(CopyOf(alone.view()));
  REQUIRE(one.Forward().ok());
  for (int64_t k : {1, 9, 64}) {
    INFO(k << " pads");
    OwnedTensor padded = RandomTensor({2, t + k, row}, rng, -2, 2);  // row 1: another sequence
    std::copy_n(alone.f32(), t * row, padded.f32() + k * row);
    OpHarness op("attention", HeadAttrs(h, hkv));
    op.inputs.push_back(CopyOf(padded.view()));
    op.inputs.push_back(IntTensor({2}, {static_cast<int32_t>(k), 0}));
    REQUIRE(op.Forward().ok());
    const float* got = op.outputs[0].f32();
    for (int64_t i = 0; i < t * h * d; ++i)
      REQUIRE(got[k * h * d + i] == Approx(one.outputs[0].f32()[i]).margin(1e-6));
    for (int64_t i = 0; i < k * h * d; ++i) REQUIRE(std::isfinite(got[i]));
  }
}

// Packed documents: three sequences packed into one row with per-token document starts give,
// at each one's tokens, what each gives alone (boundaries inside and on the edge of a 64-row
// query block); starts that decrease or pass their token are refused.
TEST_CASE("forward: attention over packed documents equals each document alone",
          "[kernels][forward]") {
  const int64_t h = 4, hkv = 2, d = 8, row = (h + 2 * hkv) * d;
  const std::vector<int64_t> lengths = {9, 55, 30};  // starts 0, 9, 64
  const int64_t t = 94;
  std::mt19937 rng(10);
  OwnedTensor packed = RandomTensor({1, t, row}, rng, -2, 2);
  std::vector<int32_t> starts;
  for (int64_t first = 0, k = 0; k < 3; first += lengths[k++])
    for (int64_t i = 0; i < lengths[k]; ++i) starts.push_back(static_cast<int32_t>(first));
  OpHarness op("attention", HeadAttrs(h, hkv));
  op.inputs.push_back(CopyOf(packed.view()));
  op.inputs.push_back(IntTensor({1, t}, starts));
  REQUIRE(op.Forward().ok());
  for (int64_t first = 0, k = 0; k < 3; first += lengths[k++]) {
    INFO("document " << k);
    OwnedTensor alone = RandomTensor({1, lengths[k], row}, rng);
    std::copy_n(packed.f32() + first * row, lengths[k] * row, alone.f32());
    OpHarness one("attention", HeadAttrs(h, hkv));
    one.inputs.push_back(CopyOf(alone.view()));
    REQUIRE(one.Forward().ok());
    for (int64_t i = 0; i < lengths[k] * h * d; ++i)
      REQUIRE(op.outputs[0].f32()[first * h * d + i] ==
              Approx(one.outputs[0].f32()[i]).margin(1e-6));
  }
  starts[20] = 0;  // decreases
  OpHarness bad("attention", HeadAttrs(h, hkv));
  bad.inputs.push_back(CopyOf(packed.view()));
  bad.inputs.push_back(IntTensor({1, t}, starts));
  Status s = bad.Forward();
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("token 20 of sequence 0 has document start 0") != std::string::npos);
}

TEST_CASE("forward: rope matches the rotate_half formula", "[kernels][forward]") {
  const int64_t b = 2, t = 9, h = 4, hkv = 2, d = 8, half = d / 2, row = (h + 2 * hkv) * d;
  const double theta = 500.0;
  std::mt19937 rng(6);
  Attrs attrs = HeadAttrs(h, hkv);
  attrs.SetFloat("theta", theta);
  OpHarness op("rope", attrs);
  op.inputs.push_back(RandomTensor({b, t, row}, rng));
  REQUIRE(op.Forward().ok());
  const float* x = op.inputs[0].f32();
  const float* y = op.outputs[0].f32();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti) {
      const int64_t base = (bi * t + ti) * row;
      for (int64_t head = 0; head < h + 2 * hkv; ++head) {
        const int64_t o = base + head * d;
        for (int64_t i = 0; i < half; ++i) {
          if (head >= h + hkv) {  // v passes through
            REQUIRE(y[o + i] == x[o + i]);
            REQUIRE(y[o + i + half] == x[o + i + half]);
            continue;
          }
          const double angle = ti * std::pow(theta, -2.0 * i / d);
          const double c = std::cos(angle), s = std::sin(angle);
          CHECK(y[o + i] == Approx(x[o + i] * c - x[o + i + half] * s).margin(2e-6));
          CHECK(y[o + i + half] == Approx(x[o + i + half] * c + x[o + i] * s).margin(2e-6));
        }
      }
    }
  // Position 0 is the identity.
  for (int64_t j = 0; j < row; ++j) CHECK(y[j] == x[j]);
}

}  // namespace
}  // namespace ds::kernels
