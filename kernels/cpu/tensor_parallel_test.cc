// The tensor-parallel ops against their single-rank equivalents: the vocab-parallel
// cross-entropy chain over t shards (the all-reduces done here by max and sum) equals
// cross_entropy within 1e-6, loss and logit gradients, with targets on every shard boundary and
// ignored rows; the vocab-parallel embedding's shards sum to the full lookup; bias_add and the
// vocab-parallel embedding are gradient-checked in gradcheck_test.cc.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/cpu/op_test_util.h"
#include "kernels/registry.h"

namespace ds::kernels {
namespace {

using testing::CopyOf;
using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;
using testing::ZerosLike;

OwnedTensor Zeros(const Shape& shape, DType dtype) {
  OwnedTensor t(shape, dtype);
  std::fill(t.f32(), t.f32() + t.numel(), 0.f);
  return t;
}

// Columns [lo, lo + n) of a [rows, v] tensor.
OwnedTensor Columns(const OwnedTensor& x, int64_t rows, int64_t v, int64_t lo, int64_t n) {
  OwnedTensor out = Zeros({rows, n}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) out.f32()[r * n + j] = x.f32()[r * v + lo + j];
  return out;
}

Attrs ShardAttrs(int64_t start, int64_t vocab) {
  Attrs a;
  a.SetInt("vocab_start", start);
  a.SetInt("vocab_size", vocab);
  a.SetInt("ignore_index", -100);
  return a;
}

TEST_CASE("vocab-parallel cross-entropy equals the full one", "[kernels][tp]") {
  const int64_t rows = 12, v = 24;
  std::mt19937 rng(11);
  OwnedTensor logits = RandomTensor({rows, v}, rng, -6, 6);
  // Targets on both sides of every boundary of 2, 3 and 4 shards, the ends, and ignored rows.
  const std::vector<int32_t> t = {0, 5, 6, 7, 11, 12, -100, 17, 18, 23, -100, 8};
  OpHarness full("cross_entropy", {});
  full.inputs.push_back(CopyOf(logits.view()));
  full.inputs.push_back(IntTensor({rows}, t));
  REQUIRE(full.Forward().ok());
  OwnedTensor one = Zeros({1}, DType::kF32);
  one.f32()[0] = 0.75f;
  OwnedTensor dfull = ZerosLike(logits.view());
  REQUIRE(full.Backward({one.view()}, {dfull.view(), Tensor()}).ok());
  const float want = full.outputs[0].f32()[0];

  for (int tp : {1, 2, 3, 4}) {
    INFO("tp " << tp);
    const int64_t vl = v / tp;
    std::vector<OpHarness> max, stats, loss;
    std::vector<float> m(rows, -INFINITY), s(2 * rows, 0.f);
    for (int r = 0; r < tp; ++r) {  // vocab_max, then the max all-reduce
      max.emplace_back("vocab_max", Attrs());
      max.back().inputs.push_back(Columns(logits, rows, v, r * vl, vl));
      REQUIRE(max.back().Forward().ok());
      for (int64_t i = 0; i < rows; ++i) m[i] = std::max(m[i], max.back().outputs[0].f32()[i]);
    }
    OwnedTensor mt = Zeros({rows}, DType::kF32);
    std::copy(m.begin(), m.end(), mt.f32());
    for (int r = 0; r < tp; ++r) {  // vocab_ce_stats, then the sum all-reduce
      stats.emplace_back("vocab_ce_stats", ShardAttrs(r * vl, v));
      stats.back().inputs.push_back(Columns(logits, rows, v, r * vl, vl));
      stats.back().inputs.push_back(CopyOf(mt.view()));
      stats.back().inputs.push_back(IntTensor({rows}, t));
      REQUIRE(stats.back().Forward().ok());
      for (int64_t i = 0; i < 2 * rows; ++i) s[i] += stats.back().outputs[0].f32()[i];
    }
    OwnedTensor st = Zeros({rows, 2}, DType::kF32);
    std::copy(s.begin(), s.end(), st.f32());
    for (int r = 0; r < tp; ++r) {
      loss.emplace_back("vocab_ce_loss", ShardAttrs(r * vl, v));
      OpHarness& h = loss.back();
      h.inputs.push_back(Columns(logits, rows, v, r * vl, vl));
      h.inputs.push_back(CopyOf(mt.view()));
      h.inputs.push_back(CopyOf(st.view()));
      h.inputs.push_back(IntTensor({rows}, t));
      REQUIRE(h.Forward().ok());
      CHECK(h.outputs[0].f32()[0] == Approx(want).epsilon(1e-6));
      OwnedTensor d = ZerosLike(h.inputs[0].view());
      REQUIRE(h.Backward({one.view()}, {d.view(), Tensor(), Tensor(), Tensor()}).ok());
      const OwnedTensor ref = Columns(dfull, rows, v, r * vl, vl);
      for (int64_t i = 0; i < d.numel(); ++i) {
        INFO("shard " << r << " element " << i);
        CHECK(d.f32()[i] == Approx(ref.f32()[i]).margin(1e-6));
      }
    }
  }
}

TEST_CASE("vocab-parallel cross-entropy refuses a target outside the vocabulary", "[kernels][tp]") {
  std::mt19937 rng(12);
  OpHarness h("vocab_ce_stats", ShardAttrs(4, 8));
  h.inputs.push_back(RandomTensor({2, 4}, rng));
  h.inputs.push_back(RandomTensor({2}, rng));
  h.inputs.push_back(IntTensor({2}, {3, 8}));
  Status s = h.Forward();
  REQUIRE(!s.ok());
  CHECK(s.message().find("target 8 at position 1 is out of range for V=8") != std::string::npos);
}

TEST_CASE("vocab-parallel embedding shards sum to the full lookup", "[kernels][tp]") {
  const int64_t v = 12, c = 5;
  std::mt19937 rng(13);
  OwnedTensor w = RandomTensor({v, c}, rng);
  OwnedTensor ids = IntTensor({2, 4}, {0, 3, 4, 11, 7, 8, 2, 5});
  OpHarness full("embedding", {});
  full.inputs.push_back(CopyOf(ids.view()));
  full.inputs.push_back(CopyOf(w.view()));
  REQUIRE(full.Forward().ok());
  for (int tp : {2, 3, 4}) {
    const int64_t vl = v / tp;
    std::vector<float> sum(full.outputs[0].numel(), 0.f);
    for (int r = 0; r < tp; ++r) {
      Attrs a;
      a.SetInt("vocab_start", r * vl);
      a.SetInt("vocab_size", v);
      OpHarness h("embedding", a);
      h.inputs.push_back(CopyOf(ids.view()));
      OwnedTensor rows = Zeros({vl, c}, DType::kF32);
      std::copy(w.f32() + r * vl * c, w.f32() + (r + 1) * vl * c, rows.f32());
      h.inputs.push_back(std::move(rows));
      REQUIRE(h.Forward().ok());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += h.outputs[0].f32()[i];
    }
    for (size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == full.outputs[0].f32()[i]);
  }
}

}  // namespace
}  // namespace ds::kernels
