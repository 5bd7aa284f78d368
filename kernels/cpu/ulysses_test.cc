// Ulysses' ops against their definitions: the layout round trip (heads out and back, time out
// and back is the identity; the parts hold the heads they should), and the split cross-entropy:
// the chunks' summed stats give cross_entropy's loss, and the chunks' logit gradients are the
// whole one's rows.
#include <catch2/catch.hpp>
#include <random>

#include "kernels/cpu/op_test_util.h"

namespace ds::kernels {
namespace {

using testing::CopyOf;
using testing::IntTensor;
using testing::OpHarness;
using testing::RandomTensor;
using testing::ZerosLike;

Attrs Layout(int64_t sp, int64_t inverse) {
  Attrs a;
  a.SetInt("sp_degree", sp);
  a.SetInt("inverse", inverse);
  a.SetString("heads", "4,2,2");
  a.SetInt("head_dim", 2);
  return a;
}

OwnedTensor Run(const char* op, const Attrs& a, const Tensor& x) {
  OpHarness h(op, a);
  h.inputs.push_back(CopyOf(x));
  REQUIRE(h.Forward().ok());
  return CopyOf(h.outputs[0].view());
}

TEST_CASE("ulysses layouts: parts hold their heads, and the inverses undo them",
          "[kernels][ulysses]") {
  std::mt19937 rng(1);
  OwnedTensor x = RandomTensor({2, 3, 16}, rng);  // q 4 x 2, k 2 x 2, v 2 x 2 per token
  OwnedTensor parts = Run("ulysses_heads", Layout(2, 0), x.view());
  REQUIRE(parts.view().shape() == Shape{2, 2, 3, 8});
  // Part 1, batch 1, token 2: q heads 2-3, k head 1, v head 1.
  const float* tok = x.f32() + (1 * 3 + 2) * 16;
  const float* got = parts.f32() + ((1 * 2 + 1) * 3 + 2) * 8;
  CHECK(got[0] == tok[4]);   // q head 2
  CHECK(got[4] == tok[10]);  // k head 1 (k starts at 8)
  CHECK(got[6] == tok[14]);  // v head 1 (v starts at 12)
  OwnedTensor back = Run("ulysses_heads", Layout(2, 1), parts.view());
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(back.f32()[i] == x.f32()[i]);
  // Time: 4 parts of batch 3 (sp != B, so a transposed mapping cannot pass by symmetry).
  OwnedTensor p4 = RandomTensor({4, 3, 2, 5}, rng);
  OwnedTensor whole = Run("ulysses_time", Layout(4, 0), p4.view());
  REQUIRE(whole.view().shape() == Shape{3, 8, 5});
  for (int j = 0; j < 4; ++j)
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 2; ++t)
        for (int k = 0; k < 5; ++k)
          REQUIRE(whole.f32()[(b * 8 + j * 2 + t) * 5 + k] ==
                  p4.f32()[((j * 3 + b) * 2 + t) * 5 + k]);
  OwnedTensor again = Run("ulysses_time", Layout(4, 1), whole.view());
  for (int64_t i = 0; i < p4.numel(); ++i) REQUIRE(again.f32()[i] == p4.f32()[i]);
}

// Uneven heads (kernels/head_split.h): 6 heads over 4 ranks are dealt 2, 2, 1, 1 and the parts
// of the 1-head ranks end in zeros; with 4 heads and 2 kv heads over 4 ranks each rank has one
// query head and ranks 0-1 share kv head 0. The inverse takes the output heads back.
TEST_CASE("ulysses layouts: uneven heads and shared kv heads", "[kernels][ulysses]") {
  std::mt19937 rng(3);
  Attrs a = Layout(4, 0);
  a.SetString("heads", "6,6,6");
  a.SetInt("head_dim", 1);
  OwnedTensor x = RandomTensor({1, 2, 18}, rng);
  OwnedTensor parts = Run("ulysses_heads", a, x.view());
  REQUIRE(parts.view().shape() == Shape{4, 1, 2, 6});
  const float* tok = x.f32() + 18;  // token 1
  const float *p2 = parts.f32() + (2 * 2 + 1) * 6, *p3 = parts.f32() + (3 * 2 + 1) * 6;
  CHECK(p2[0] == tok[4]);   // rank 2: q head 4
  CHECK(p2[1] == tok[10]);  // its k head 4 (k starts at 6)
  CHECK(p2[2] == tok[16]);  // v head 4
  CHECK(p3[0] == tok[5]);
  for (int k = 3; k < 6; ++k) CHECK((p2[k] == 0.f && p3[k] == 0.f));  // padding
  Attrs o = Layout(4, 1);
  o.SetString("heads", "6");
  o.SetInt("head_dim", 1);
  OwnedTensor out = RandomTensor({4, 1, 2, 2}, rng);
  OwnedTensor back = Run("ulysses_heads", o, out.view());
  REQUIRE(back.view().shape() == Shape{1, 2, 6});
  CHECK(back.f32()[6 + 5] == out.f32()[(3 * 2 + 1) * 2]);  // token 1, head 5 from rank 3

  Attrs g = Layout(4, 0);  // heads "4,2,2", head_dim 2
  OwnedTensor y = RandomTensor({1, 1, 16}, rng);
  OwnedTensor shared = Run("ulysses_heads", g, y.view());
  REQUIRE(shared.view().shape() == Shape{4, 1, 1, 6});
  for (int j = 0; j < 4; ++j) {
    const float* part = shared.f32() + j * 6;
    CHECK(part[0] == y.f32()[j * 2]);          // query head j
    CHECK(part[2] == y.f32()[8 + j / 2 * 2]);  // kv head j / 2
    CHECK(part[4] == y.f32()[12 + j / 2 * 2]);
  }
  Attrs bad = Layout(4, 0);
  bad.SetString("heads", "6,3,3");  // 3 kv heads over 4 ranks, 6 % 4 != 0
  OpHarness h("ulysses_heads", bad);
  h.inputs.push_back(RandomTensor({1, 1, 24}, rng));
  CHECK_FALSE(h.Forward().ok());
}

TEST_CASE("ulysses cross-entropy: chunks' stats and gradients make the whole loss's",
          "[kernels][ulysses]") {
  std::mt19937 rng(2);
  Attrs ce;
  ce.SetInt("ignore_index", -1);
  OwnedTensor logits = RandomTensor({2, 4, 7}, rng, -3, 3);
  OwnedTensor targets = IntTensor({2, 4}, {3, -1, 0, 6, 2, 2, -1, 5});
  OpHarness whole("cross_entropy", ce);
  whole.inputs.push_back(CopyOf(logits.view()));
  whole.inputs.push_back(CopyOf(targets.view()));
  REQUIRE(whole.Forward().ok());
  OwnedTensor dwhole = ZerosLike(logits.view());
  OwnedTensor one = RandomTensor({1}, rng, 0.5f, 1.5f);
  REQUIRE(whole.Backward({one.view()}, {dwhole.view(), Tensor()}).ok());
  // Two chunks of 2 positions: stats summed (the plan's all-reduce), then each chunk's loss.
  float stats[2] = {0, 0};
  std::vector<OwnedTensor> chunk_logits, chunk_targets;
  for (int r = 0; r < 2; ++r) {
    Attrs a;
    a.SetInt("sp_rank", r);
    a.SetInt("sp_degree", 2);
    chunk_logits.push_back(Run("seq_chunk", a, logits.view()));
    OpHarness t("seq_chunk", a);
    t.inputs.push_back(CopyOf(targets.view()));
    REQUIRE(t.Forward().ok());
    chunk_targets.push_back(CopyOf(t.outputs[0].view()));
    OpHarness s("seq_ce_stats", ce);
    s.inputs.push_back(CopyOf(chunk_logits.back().view()));
    s.inputs.push_back(CopyOf(chunk_targets.back().view()));
    REQUIRE(s.Forward().ok());
    stats[0] += s.outputs[0].f32()[0];
    stats[1] += s.outputs[0].f32()[1];
  }
  CHECK(stats[1] == 6);
  for (int r = 0; r < 2; ++r) {
    OpHarness l("seq_ce_loss", ce);
    l.inputs.push_back(CopyOf(chunk_logits[r].view()));
    l.inputs.push_back(CopyOf(chunk_targets[r].view()));
    OwnedTensor st({2}, DType::kF32);
    st.f32()[0] = stats[0];
    st.f32()[1] = stats[1];
    l.inputs.push_back(std::move(st));
    REQUIRE(l.Forward().ok());
    CHECK(l.outputs[0].f32()[0] == Approx(whole.outputs[0].f32()[0]).epsilon(1e-6));
    OwnedTensor d = ZerosLike(chunk_logits[r].view());
    REQUIRE(l.Backward({one.view()}, {d.view(), Tensor(), Tensor()}).ok());
    for (int b = 0; b < 2; ++b)
      for (int k = 0; k < 2 * 7; ++k)
        CHECK(d.f32()[b * 14 + k] ==
              Approx(dwhole.f32()[(b * 4 + r * 2) * 7 + k]).margin(1e-7).epsilon(1e-6));
  }
}

}  // namespace
}  // namespace ds::kernels
