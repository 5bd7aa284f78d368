// The gradient checks of the parallel layouts' ops (tensor, sequence, expert and pipeline
// parallelism; gradcheck_test.cc walks the registry). Where the plan completes an op (a
// collective writes its output, or all-reduces what its loss reads), the case's hooks do what
// the plan would, so the check sees the derivative the layout trains with.
#include <catch2/catch.hpp>
#include <cmath>

#include "kernels/cpu/gradcheck_util.h"

namespace ds::kernels::testing {
namespace {

Attrs SpAttrs(int64_t rank, int64_t degree) {
  Attrs a;
  a.SetInt("sp_rank", rank);
  a.SetInt("sp_degree", degree);
  return a;
}

// Runs `op` on copies of `inputs` and returns its first output.
OwnedTensor RunOp(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& inputs) {
  OpHarness h(op, attrs);
  for (const Tensor& t : inputs) h.inputs.push_back(CopyOf(t));
  REQUIRE(h.Forward().ok());
  return std::move(h.outputs[0]);
}

// sp_gather with grad_chunk (MoE's tokens split over tp): the plan's all-gather writes the
// whole [B, T, C] from every rank's chunk; here rank 1 of 3, the other chunks fixed.
void SpGather() {
  std::mt19937 rng(11);
  Attrs a = SpAttrs(1, 3);
  a.SetInt("grad_chunk", 1);
  auto whole = std::make_shared<OwnedTensor>(RandomTensor({2, 3, 5}, rng));
  GradCase c{"sp_gather", a,
             Inputs(RandomTensor({2, 5}, rng), IntTensor({2, 3}, {1, 2, 3, 4, 5, 6}))};
  c.after = [whole](OpHarness& h) {  // the all-gather: rows 2 and 3 are this rank's
    std::copy(whole->f32(), whole->f32() + whole->numel(), h.outputs[0].f32());
    std::copy(h.inputs[0].f32(), h.inputs[0].f32() + 10, h.outputs[0].f32() + 10);
  };
  CheckGradients(std::move(c));
}

// The vocab-parallel cross-entropy of shard [4, 8) of 12 columns: the max and the two sums
// all-reduced over this shard and the two fixed others, as the plan does, before the loss.
void VocabCeLoss() {
  std::mt19937 rng(12);
  const int64_t v = 12, w = 4;
  auto others = std::make_shared<std::vector<OwnedTensor>>();
  others->push_back(RandomTensor({2, 3, w}, rng, -3, 3));  // columns [0, 4)
  others->push_back(RandomTensor({2, 3, w}, rng, -3, 3));  // columns [8, 12)
  auto shard = [v](int64_t start) {
    Attrs a;
    a.SetInt("vocab_start", start);
    a.SetInt("vocab_size", v);
    a.SetInt("ignore_index", -1);
    return a;
  };
  OwnedTensor targets = IntTensor({2, 3}, {5, 0, -1, 11, 6, 4});
  GradCase c{"vocab_ce_loss", shard(4),
             Inputs(RandomTensor({2, 3, w}, rng, -3, 3), OwnedTensor({2, 3}, DType::kF32),
                    OwnedTensor({2, 3, 2}, DType::kF32), std::move(targets))};
  c.before = [others, shard](OpHarness& h) {
    const Tensor parts[3] = {(*others)[0].view(), h.inputs[0].view(), (*others)[1].view()};
    float* m = h.inputs[1].f32();
    float* s = h.inputs[2].f32();
    for (int64_t r = 0; r < 6; ++r) m[r] = -INFINITY;
    for (const Tensor& p : parts) {  // the max all-reduce
      OwnedTensor pm = RunOp("vocab_max", {}, {p});
      for (int64_t r = 0; r < 6; ++r) m[r] = std::max(m[r], pm.f32()[r]);
    }
    std::fill(s, s + 12, 0.f);
    for (int k = 0; k < 3; ++k) {  // the sum all-reduce
      OwnedTensor ps =
          RunOp("vocab_ce_stats", shard(4 * k), {parts[k], h.inputs[1].view(), h.inputs[3].view()});
      for (int64_t i = 0; i < 12; ++i) s[i] += ps.f32()[i];
    }
  };
  CheckGradients(std::move(c));
}

// Ulysses' loss: chunk 1 of 2 of the sequence; the stats of both chunks summed (the plan's
// all-reduce) before the loss.
void SeqCeLoss() {
  std::mt19937 rng(13);
  Attrs ce;
  ce.SetInt("ignore_index", -1);
  auto other = std::make_shared<OwnedTensor>(RandomTensor({2, 2, 7}, rng, -3, 3));
  auto other_targets = std::make_shared<OwnedTensor>(IntTensor({2, 2}, {3, -1, 2, 6}));
  GradCase c{"seq_ce_loss", ce,
             Inputs(RandomTensor({2, 2, 7}, rng, -3, 3), IntTensor({2, 2}, {0, 6, -1, 5}),
                    OwnedTensor({2}, DType::kF32))};
  c.before = [other, other_targets, ce](OpHarness& h) {
    OwnedTensor mine = RunOp("seq_ce_stats", ce, {h.inputs[0].view(), h.inputs[1].view()});
    OwnedTensor theirs = RunOp("seq_ce_stats", ce, {other->view(), other_targets->view()});
    for (int k = 0; k < 2; ++k) h.inputs[2].f32()[k] = mine.f32()[k] + theirs.f32()[k];
  };
  CheckGradients(std::move(c));
}

// pipe_send stands for the next stage's loss: its backward adds the gradient received for
// each sent tensor, the derivative of L = sum_i <x_i, g_i> (the plan seeds dL = 1).
void PipeSend() {
  std::mt19937 rng(14);
  GradCase c{"pipe_send",
             {},
             Inputs(RandomTensor({2, 3, 4}, rng), RandomTensor({2, 3, 4}, rng),
                    RandomTensor({5}, rng), RandomTensor({5}, rng))};
  c.after = [](OpHarness& h) {
    double l = 0;
    for (size_t i = 0; i < h.inputs.size(); i += 2)
      for (int64_t j = 0; j < h.inputs[i].numel(); ++j)
        l += double(h.inputs[i].f32()[j]) * h.inputs[i + 1].f32()[j];
    h.outputs[0].f32()[0] = static_cast<float>(l);
  };
  c.unit_projection = true;
  CheckGradients(std::move(c));
}

// Gate logits whose order per token is a random permutation with gaps of about 1, so the finite
// differences never change a token's experts.
OwnedTensor SeparatedLogits(int64_t tokens, int64_t experts, std::mt19937& rng) {
  OwnedTensor t = RandomTensor({tokens, experts}, rng, -0.2f, 0.2f);
  std::vector<int> perm(experts);
  for (int64_t n = 0; n < tokens; ++n) {
    for (int64_t e = 0; e < experts; ++e) perm[e] = static_cast<int>(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < experts; ++e) t.f32()[n * experts + e] += perm[e];
  }
  return t;
}

Attrs Gating(int64_t experts, int64_t k, double factor, int64_t drop) {
  Attrs a;
  a.SetInt("num_experts", experts);
  a.SetInt("top_k", k);
  a.SetFloat("capacity_factor", factor);
  a.SetInt("min_capacity", 0);
  a.SetInt("drop_tokens", drop);
  a.SetString("second_expert", "argmax");
  return a;
}

// 6 tokens, 3 experts without drops: buffer capacity 6 (route e x 6 + p), step capacity 3.
OwnedTensor Routes() { return IntTensor({2, 3, 2}, {0, 6, 12, -1, 1, 13, 7, 2, 14, -1, 8, -1}); }

void MixtureOfExperts(GradcheckTable* t) {
  (*t)["moe_router"] = [] {
    std::mt19937 rng(9);  // top-1 with drops (random token selection), top-2 with drops
    CheckGradients({"moe_router", Gating(4, 1, 0.5, 1), Inputs(SeparatedLogits(24, 4, rng))});
    CheckGradients({"moe_router", Gating(4, 2, 0.5, 1), Inputs(SeparatedLogits(24, 4, rng))});
    CheckGradients({"moe_router", Gating(3, 2, 1.0, 0), Inputs(SeparatedLogits(10, 3, rng))});
  };
  (*t)["moe_dispatch"] = [] {
    std::mt19937 rng(9);
    CheckGradients({"moe_dispatch", Gating(3, 2, 1.0, 0),
                    Inputs(RandomTensor({2, 3, 5}, rng), Routes(), FloatTensor({1}, {3}))});
  };
  (*t)["expert_linear"] = [] {  // with and without bias, two blocks per expert
    std::mt19937 rng(9);
    CheckGradients({"expert_linear",
                    {},
                    Inputs(RandomTensor({4, 5, 3}, rng), FloatTensor({1}, {4}),
                           RandomTensor({2, 6, 3}, rng), RandomTensor({2, 6}, rng))});
    CheckGradients({"expert_linear",
                    {},
                    Inputs(RandomTensor({4, 5, 3}, rng), FloatTensor({1}, {3}),
                           RandomTensor({4, 6, 3}, rng))});
  };
  (*t)["moe_combine"] = [] {
    std::mt19937 rng(9);
    CheckGradients({"moe_combine",
                    {},
                    Inputs(RandomTensor({3, 6, 5}, rng), Routes(), RandomTensor({2, 3, 2}, rng),
                           FloatTensor({1}, {3}))});
  };
  (*t)["moe_residual_mix"] = [] {
    std::mt19937 rng(9);
    CheckGradients({"moe_residual_mix",
                    {},
                    Inputs(RandomTensor({2, 3, 5}, rng), RandomTensor({2, 3, 5}, rng),
                           RandomTensor({2, 3, 2}, rng, -2, 2))});
  };
  (*t)["moe_loss"] = [] {
    std::mt19937 rng(9);
    Attrs a;
    a.SetFloat("coeff", 0.25);
    CheckGradients(
        {"moe_loss", a,
         Inputs(RandomTensor({1}, rng), RandomTensor({1}, rng), RandomTensor({1}, rng))});
  };
}

Attrs UlyssesAttrs(int64_t sp, int64_t inverse, const char* heads) {
  Attrs a;
  a.SetInt("sp_degree", sp);
  a.SetInt("inverse", inverse);
  a.SetString("heads", heads);
  a.SetInt("head_dim", 3);
  return a;
}

void Ulysses(GradcheckTable* t) {
  (*t)["seq_chunk"] = [] {  // chunk 1 of 3
    std::mt19937 rng(10);
    CheckGradients({"seq_chunk", SpAttrs(1, 3), Inputs(RandomTensor({2, 6, 5}, rng))});
  };
  (*t)["ulysses_heads"] = [] {
    std::mt19937 rng(10);  // both ways (q, k, v segments)
    CheckGradients(
        {"ulysses_heads", UlyssesAttrs(2, 0, "4,2,2"), Inputs(RandomTensor({2, 3, 24}, rng))});
    CheckGradients(
        {"ulysses_heads", UlyssesAttrs(2, 1, "4,2,2"), Inputs(RandomTensor({2, 2, 3, 12}, rng))});
    // Uneven: 6 heads over 4 ranks (2, 2, 1, 1; parts padded), both ways.
    CheckGradients(
        {"ulysses_heads", UlyssesAttrs(4, 0, "6,6,6"), Inputs(RandomTensor({2, 2, 54}, rng))});
    CheckGradients(
        {"ulysses_heads", UlyssesAttrs(4, 1, "6"), Inputs(RandomTensor({4, 2, 2, 6}, rng))});
    // Shared kv heads: 4 heads, 2 kv heads over 4 ranks.
    CheckGradients(
        {"ulysses_heads", UlyssesAttrs(4, 0, "4,2,2"), Inputs(RandomTensor({2, 2, 24}, rng))});
  };
  (*t)["ulysses_time"] = [] {
    std::mt19937 rng(10);  // both ways
    CheckGradients(
        {"ulysses_time", UlyssesAttrs(2, 0, "4,2,2"), Inputs(RandomTensor({2, 3, 4, 5}, rng))});
    CheckGradients(
        {"ulysses_time", UlyssesAttrs(2, 1, "4,2,2"), Inputs(RandomTensor({3, 4, 5}, rng))});
    Attrs a = UlyssesAttrs(4, 0, "4,2,2");
    a.SetInt("width", 4);  // a rank of 1 head's q, k, v (3 x 3 features, of parts of 18)
    CheckGradients({"ulysses_time", a, Inputs(RandomTensor({4, 2, 1, 7}, rng))});
    a.SetInt("inverse", 1);
    a.SetInt("part_width", 7);
    CheckGradients({"ulysses_time", a, Inputs(RandomTensor({2, 4, 4}, rng))});
  };
  (*t)["seq_ce_loss"] = SeqCeLoss;
}

}  // namespace

void AddParallelChecks(GradcheckTable* t) {
  (*t)["sp_split"] = [] {  // chunk 1 of 3
    std::mt19937 rng(2);
    CheckGradients({"sp_split", SpAttrs(1, 3), Inputs(RandomTensor({2, 3, 5}, rng))});
  };
  (*t)["sp_gather"] = SpGather;
  (*t)["vocab_ce_loss"] = VocabCeLoss;
  (*t)["pipe_send"] = PipeSend;
  MixtureOfExperts(t);
  Ulysses(t);
}

}  // namespace ds::kernels::testing
