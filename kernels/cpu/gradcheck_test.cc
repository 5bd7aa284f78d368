// Finite-difference gradient check for every registered CPU fp32 op: the analytic
// gradient of L = sum(out * r) (r a fixed random projection) against central differences
// (L summed in double from the fp32 outputs), plus accumulation: calling backward twice
// doubles every gradient.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
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

struct GradCase {
  std::string op;
  Attrs attrs;
  std::vector<OwnedTensor> inputs;
  uint64_t seed = 1;
  double step = 1e-2;  // finite-difference step
  int samples = 200;   // checked elements per input (all when fewer)
};

double Loss(OpHarness& h, const std::vector<OwnedTensor>& proj) {
  REQUIRE(h.Forward().ok());
  double loss = 0.0;
  for (size_t o = 0; o < proj.size(); ++o)
    for (int64_t i = 0; proj[o].view().defined() && i < proj[o].numel(); ++i)
      loss += static_cast<double>(h.outputs[o].f32()[i]) * proj[o].f32()[i];
  return loss;
}

// Checks the analytic gradients of c's op against central differences.
void CheckGradients(GradCase c) {
  INFO("op " << c.op);
  OpHarness h(c.op, c.attrs);
  REQUIRE(h.def() != nullptr);
  h.seed = c.seed;
  h.inputs = std::move(c.inputs);
  REQUIRE(h.Forward().ok());
  std::mt19937 rng(7);
  std::vector<OwnedTensor> proj;
  // Integer outputs (MoE routes) take no gradient: no projection.
  for (const OwnedTensor& o : h.outputs)
    proj.push_back(o.view().dtype() == DType::kF32 ? RandomTensor(o.view().shape(), rng)
                                                   : OwnedTensor());

  // Analytic: backward twice; the second call must exactly double (accumulate).
  std::vector<OwnedTensor> grads;
  std::vector<Tensor> grad_in, grad_out;
  for (const OwnedTensor& p : proj) grad_out.push_back(p.view());
  for (size_t i = 0; i < h.inputs.size(); ++i) {
    const bool wanted = !(h.def()->non_differentiable_inputs & (1u << i));
    grads.push_back(wanted ? ZerosLike(h.inputs[i].view()) : OwnedTensor());
    grad_in.push_back(grads.back().view());
  }
  REQUIRE(h.Backward(grad_out, grad_in).ok());
  std::vector<OwnedTensor> once;
  for (const OwnedTensor& g : grads) once.push_back(CopyOf(g.view()));
  REQUIRE(h.Backward(grad_out, grad_in).ok());
  for (size_t i = 0; i < grads.size(); ++i)
    for (int64_t j = 0; grad_in[i].defined() && j < grads[i].numel(); ++j)
      REQUIRE(grads[i].f32()[j] == Approx(2.0 * once[i].f32()[j]).epsilon(1e-5).margin(1e-6));

  // Numeric, on a sample of each differentiable input's elements.
  for (size_t i = 0; i < h.inputs.size(); ++i) {
    if (!grad_in[i].defined()) continue;
    const int64_t n = h.inputs[i].numel();
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < n; ++j) idx.push_back(j);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(std::min<int64_t>(n, c.samples));
    double max_err = 0.0, max_ref = 1e-3;
    std::vector<double> analytic, numeric;
    for (int64_t j : idx) {
      float* x = h.inputs[i].f32() + j;
      const float x0 = *x;
      *x = static_cast<float>(x0 + c.step);
      const double up = Loss(h, proj);
      *x = static_cast<float>(x0 - c.step);
      const double down = Loss(h, proj);
      *x = x0;
      numeric.push_back((up - down) / (2 * c.step));
      analytic.push_back(once[i].f32()[j]);
      max_ref = std::max(max_ref, std::fabs(numeric.back()));
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      const double err = std::fabs(analytic[k] - numeric[k]);
      max_err = std::max(max_err, err / max_ref);
      INFO("input " << i << " element " << idx[k] << ": analytic " << analytic[k] << " numeric "
                    << numeric[k]);
      CHECK(err <= 1e-3 * max_ref + 1e-2 * std::fabs(numeric[k]));
    }
    INFO("input " << i << " max error / max |grad| = " << max_err);
    CHECK(max_err < 1e-3);
  }
}

Attrs HeadAttrs(int64_t n_head, int64_t n_kv_head) {
  Attrs a;
  a.SetInt("n_head", n_head);
  a.SetInt("n_kv_head", n_kv_head);
  return a;
}

// A float tensor of the given values (the MoE capacity, the PPO pretraining weights).
OwnedTensor FloatTensor(const Shape& shape, const std::vector<float>& values) {
  OwnedTensor t(shape, DType::kF32);
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

template <typename... T>
std::vector<OwnedTensor> Inputs(T&&... tensors) {
  std::vector<OwnedTensor> v;
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

TEST_CASE("gradcheck: elementwise ops", "[kernels][gradcheck]") {
  std::mt19937 rng(1);
  SECTION("gelu") { CheckGradients({"gelu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))}); }
  SECTION("silu") { CheckGradients({"silu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))}); }
  SECTION("add") {
    CheckGradients({"add", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  }
  SECTION("mul") {
    CheckGradients({"mul", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  }
  SECTION("dropout, training, fixed seed") {
    Attrs a;
    a.SetFloat("p", 0.3);
    CheckGradients({"dropout", a, Inputs(RandomTensor({4, 33}, rng)), /*seed=*/1234});
  }
}

TEST_CASE("gradcheck: embeddings and linear", "[kernels][gradcheck]") {
  std::mt19937 rng(2);
  SECTION("embedding with repeated ids") {
    CheckGradients(
        {"embedding",
         {},
         Inputs(IntTensor({2, 5}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}), RandomTensor({10, 6}, rng))});
  }
  SECTION("vocab-parallel embedding: ids outside the shard take no gradient") {
    Attrs a;
    a.SetInt("vocab_start", 4);
    a.SetInt("vocab_size", 12);
    CheckGradients(
        {"embedding", a,
         Inputs(IntTensor({2, 5}, {3, 4, 7, 11, 5, 9, 2, 6, 5, 8}), RandomTensor({4, 6}, rng))});
  }
  SECTION("sp_split: chunk 1 of 3") {
    Attrs a;
    a.SetInt("sp_rank", 1);
    a.SetInt("sp_degree", 3);
    CheckGradients({"sp_split", a, Inputs(RandomTensor({2, 3, 5}, rng))});
  }
  SECTION("bias_add") {
    CheckGradients({"bias_add", {}, Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({7}, rng))});
  }
  SECTION("position_embedding") {
    CheckGradients({"position_embedding",
                    {},
                    Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng))});
  }
  SECTION("position_embedding at given positions (left padding: repeats)") {
    CheckGradients({"position_embedding",
                    {},
                    Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng),
                           IntTensor({2, 5}, {0, 0, 0, 1, 2, 3, 4, 5, 6, 7}))});
  }
  SECTION("position_embedding with left pads [B]") {
    CheckGradients(
        {"position_embedding",
         {},
         Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng), IntTensor({2}, {2, 0}))});
  }
  SECTION("linear with bias") {
    CheckGradients(
        {"linear",
         {},
         Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({5, 7}, rng), RandomTensor({5}, rng))});
  }
  SECTION("linear without bias") {
    CheckGradients({"linear", {}, Inputs(RandomTensor({4, 7}, rng), RandomTensor({5, 7}, rng))});
  }
}

TEST_CASE("gradcheck: norms", "[kernels][gradcheck]") {
  std::mt19937 rng(3);
  SECTION("layernorm") {
    CheckGradients({"layernorm",
                    {},
                    Inputs(RandomTensor({2, 3, 16}, rng, -2, 2), RandomTensor({16}, rng),
                           RandomTensor({16}, rng))});
  }
  SECTION("rmsnorm") {
    CheckGradients(
        {"rmsnorm", {}, Inputs(RandomTensor({5, 16}, rng, -2, 2), RandomTensor({16}, rng))});
  }
}

TEST_CASE("gradcheck: rope", "[kernels][gradcheck]") {
  std::mt19937 rng(4);
  Attrs a = HeadAttrs(4, 2);
  a.SetFloat("theta", 100.0);
  CheckGradients({"rope", a, Inputs(RandomTensor({2, 6, 8 * 8}, rng))});
  CheckGradients(
      {"rope", a, Inputs(RandomTensor({2, 3, 8 * 8}, rng), IntTensor({2, 3}, {0, 0, 1, 5, 6, 7}))});
  CheckGradients({"rope", a, Inputs(RandomTensor({2, 6, 8 * 8}, rng), IntTensor({2}, {0, 3}))});
}

TEST_CASE("gradcheck: attention", "[kernels][gradcheck]") {
  std::mt19937 rng(5);
  // The qkv values are scaled up so the softmax is far from uniform.
  SECTION("multi-head, short sequence") {
    CheckGradients({"attention", HeadAttrs(2, 2), Inputs(RandomTensor({2, 5, 6 * 4}, rng, -2, 2))});
  }
  SECTION("GQA H=4 Hkv=2, T=70 (partial second block)") {
    CheckGradients(
        {"attention", HeadAttrs(4, 2), Inputs(RandomTensor({2, 70, 8 * 8}, rng, -2, 2))});
  }
  SECTION("left pads (a padded query block, a pad-only row, one without)") {
    CheckGradients({"attention", HeadAttrs(4, 2),
                    Inputs(RandomTensor({3, 70, 8 * 8}, rng, -2, 2), IntTensor({3}, {5, 0, 66}))});
  }
  SECTION("B*Hkv below the thread count: split backward") {
    const int saved = omp_get_max_threads();
    for (int threads : {1, 4}) {
      omp_set_num_threads(threads);
      INFO("threads " << threads);
      CheckGradients(
          {"attention", HeadAttrs(2, 1), Inputs(RandomTensor({1, 150, 4 * 8}, rng, -2, 2))});
    }
    omp_set_num_threads(saved);
  }
}

// The reward model's pairwise loss: 2 pairs scored at their own positions (the gradient is 0
// elsewhere, which the check sees too).
TEST_CASE("gradcheck: reward_pair_loss", "[kernels][gradcheck]") {
  std::mt19937 rng(16);
  CheckGradients({"reward_pair_loss", Attrs(),
                  Inputs(RandomTensor({4, 3, 1}, rng, -2, 2),
                         IntTensor({4, 3}, {0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1}))});
}

// PPO's losses, away from the clip's edges (where the max switches branch): old log-probs and
// old values offset by +-0.05 (inside the 0.2 clip) and +-0.5 (outside), masked positions too.
TEST_CASE("gradcheck: ppo_actor_loss and ppo_value_loss", "[kernels][gradcheck][ppo]") {
  std::mt19937 rng(17);
  const int64_t rows = 6, v = 5;
  OwnedTensor logits = RandomTensor({2, 3, v}, rng, -2, 2);
  const std::vector<int32_t> tokens = {1, 4, 0, 2, 3, 3};
  const float offsets[rows] = {0.05f, -0.5f, -0.05f, 0.5f, 0.05f, 0.5f};
  const float adv[rows] = {1.f, 1.f, -1.f, -1.5f, 2.f, 0.5f};
  const float mask[rows] = {1, 1, 1, 1, 0, 1};
  OwnedTensor old = RandomTensor({2, 3}, rng), a = RandomTensor({2, 3}, rng),
              m = RandomTensor({2, 3}, rng);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.f32() + r * v;
    double total = 0;
    for (int64_t j = 0; j < v; ++j) total += std::exp(double(x[j]));
    old.f32()[r] = static_cast<float>(x[tokens[r]] - std::log(total)) - offsets[r];
    a.f32()[r] = adv[r];
    m.f32()[r] = mask[r];
  }
  Attrs clip;
  clip.SetFloat("cliprange", 0.2);
  // With DeepSpeed-Chat's pretraining term: weights on some masked and some unmasked positions.
  CheckGradients(
      {"ppo_actor_loss", clip,
       Inputs(testing::CopyOf(logits.view()), IntTensor({2, 3}, tokens),
              testing::CopyOf(old.view()), testing::CopyOf(a.view()), testing::CopyOf(m.view()),
              FloatTensor({2, 3}, {0.f, 2.5f, 0.f, 1.f, 3.f, 0.f}))});
  {  // The pretraining term alone (mask 0, weights 2): 2 x the tokens' cross-entropy.
    OpHarness ptx("ppo_actor_loss", clip);
    ptx.inputs.push_back(testing::CopyOf(logits.view()));
    ptx.inputs.push_back(IntTensor({2, 3}, tokens));
    for (int k = 0; k < 3; ++k)
      ptx.inputs.push_back(FloatTensor({2, 3}, std::vector<float>(6, 0.f)));
    ptx.inputs.push_back(FloatTensor({2, 3}, std::vector<float>(6, 2.f)));
    REQUIRE(ptx.Forward().ok());
    OpHarness ce("cross_entropy", {});
    ce.inputs.push_back(testing::CopyOf(logits.view()));
    ce.inputs.push_back(IntTensor({2, 3}, tokens));
    REQUIRE(ce.Forward().ok());
    CHECK(ptx.outputs[0].f32()[0] == Approx(2 * ce.outputs[0].f32()[0]).epsilon(1e-6));
  }
  CheckGradients({"ppo_actor_loss", clip,
                  Inputs(std::move(logits), IntTensor({2, 3}, tokens), std::move(old), std::move(a),
                         std::move(m))});
  OwnedTensor values = RandomTensor({2, 3, 1}, rng), old_v = RandomTensor({2, 3}, rng),
              ret = RandomTensor({2, 3}, rng, -2, 2);
  for (int64_t r = 0; r < rows; ++r) old_v.f32()[r] = values.f32()[r] - offsets[r];
  OwnedTensor vm = IntTensor({2, 3}, {1, 1, 1, 1, 0, 1});
  Attrs vclip;
  vclip.SetFloat("cliprange_value", 0.2);
  CheckGradients({"ppo_value_loss", vclip,
                  Inputs(std::move(values), std::move(old_v), std::move(ret), std::move(vm))});
}

TEST_CASE("gradcheck: cross_entropy with ignored targets", "[kernels][gradcheck]") {
  std::mt19937 rng(6);
  Attrs a;
  a.SetInt("ignore_index", -1);
  CheckGradients({"cross_entropy", a,
                  Inputs(RandomTensor({2, 4, 11}, rng, -3, 3),
                         IntTensor({2, 4}, {3, -1, 0, 10, 7, 7, -1, 2}))});
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

TEST_CASE("gradcheck: mixture of experts", "[kernels][gradcheck][moe]") {
  std::mt19937 rng(9);
  SECTION("router top-1 with drops (random token selection)") {
    CheckGradients({"moe_router", Gating(4, 1, 0.5, 1), Inputs(SeparatedLogits(24, 4, rng))});
  }
  SECTION("router top-2 with drops: weights renormalised over the survivors") {
    CheckGradients({"moe_router", Gating(4, 2, 0.5, 1), Inputs(SeparatedLogits(24, 4, rng))});
  }
  SECTION("router top-2 without drops") {
    CheckGradients({"moe_router", Gating(3, 2, 1.0, 0), Inputs(SeparatedLogits(10, 3, rng))});
  }
  // 6 tokens, 3 experts without drops: buffer capacity 6 (route e x 6 + p), step capacity 3.
  OwnedTensor routes = IntTensor({2, 3, 2}, {0, 6, 12, -1, 1, 13, 7, 2, 14, -1, 8, -1});
  SECTION("dispatch") {
    Attrs a = Gating(3, 2, 1.0, 0);
    CheckGradients(
        {"moe_dispatch", a,
         Inputs(RandomTensor({2, 3, 5}, rng), CopyOf(routes.view()), FloatTensor({1}, {3}))});
  }
  SECTION("expert_linear with and without bias, two blocks per expert") {
    CheckGradients({"expert_linear",
                    {},
                    Inputs(RandomTensor({4, 5, 3}, rng), FloatTensor({1}, {4}),
                           RandomTensor({2, 6, 3}, rng), RandomTensor({2, 6}, rng))});
    CheckGradients({"expert_linear",
                    {},
                    Inputs(RandomTensor({4, 5, 3}, rng), FloatTensor({1}, {3}),
                           RandomTensor({4, 6, 3}, rng))});
  }
  SECTION("combine") {
    CheckGradients({"moe_combine",
                    {},
                    Inputs(RandomTensor({3, 6, 5}, rng), CopyOf(routes.view()),
                           RandomTensor({2, 3, 2}, rng), FloatTensor({1}, {3}))});
  }
  SECTION("residual mix") {
    CheckGradients({"moe_residual_mix",
                    {},
                    Inputs(RandomTensor({2, 3, 5}, rng), RandomTensor({2, 3, 5}, rng),
                           RandomTensor({2, 3, 2}, rng, -2, 2))});
  }
  SECTION("moe_loss") {
    Attrs a;
    a.SetFloat("coeff", 0.25);
    CheckGradients(
        {"moe_loss", a,
         Inputs(RandomTensor({1}, rng), RandomTensor({1}, rng), RandomTensor({1}, rng))});
  }
}

TEST_CASE("gradcheck: Ulysses sequence parallelism", "[kernels][gradcheck][ulysses]") {
  std::mt19937 rng(10);
  auto attrs = [](int64_t sp, int64_t inverse) {
    Attrs a;
    a.SetInt("sp_degree", sp);
    a.SetInt("inverse", inverse);
    a.SetString("heads", "4,2,2");
    a.SetInt("head_dim", 3);
    return a;
  };
  SECTION("seq_chunk: chunk 1 of 3") {
    Attrs a;
    a.SetInt("sp_rank", 1);
    a.SetInt("sp_degree", 3);
    CheckGradients({"seq_chunk", a, Inputs(RandomTensor({2, 6, 5}, rng))});
  }
  SECTION("ulysses_heads both ways (q, k, v segments)") {
    CheckGradients({"ulysses_heads", attrs(2, 0), Inputs(RandomTensor({2, 3, 24}, rng))});
    CheckGradients({"ulysses_heads", attrs(2, 1), Inputs(RandomTensor({2, 2, 3, 12}, rng))});
  }
  SECTION("ulysses_time both ways") {
    CheckGradients({"ulysses_time", attrs(2, 0), Inputs(RandomTensor({2, 3, 4, 5}, rng))});
    CheckGradients({"ulysses_time", attrs(2, 1), Inputs(RandomTensor({3, 4, 5}, rng))});
  }
  SECTION("uneven heads: 6 heads over 4 ranks (2, 2, 1, 1; parts padded)") {
    Attrs a = attrs(4, 0);
    a.SetString("heads", "6,6,6");
    CheckGradients({"ulysses_heads", a, Inputs(RandomTensor({2, 2, 54}, rng))});
    a.SetString("heads", "6");
    a.SetInt("inverse", 1);
    CheckGradients({"ulysses_heads", a, Inputs(RandomTensor({4, 2, 2, 6}, rng))});
    Attrs t = attrs(4, 0);
    t.SetInt("width", 4);  // a rank of 1 head's q, k, v (3 x 3 features, of parts of 18)
    CheckGradients({"ulysses_time", t, Inputs(RandomTensor({4, 2, 1, 7}, rng))});
    t.SetInt("inverse", 1);
    t.SetInt("part_width", 7);
    CheckGradients({"ulysses_time", t, Inputs(RandomTensor({2, 4, 4}, rng))});
  }
  SECTION("shared kv heads: 4 heads, 2 kv heads over 4 ranks") {
    Attrs a = attrs(4, 0);
    a.SetString("heads", "4,2,2");
    CheckGradients({"ulysses_heads", a, Inputs(RandomTensor({2, 2, 24}, rng))});
  }
}

TEST_CASE("gradcheck: undefined gradients are skipped, the others unchanged",
          "[kernels][gradcheck]") {
  std::mt19937 rng(8);
  OpHarness h("linear", {});
  h.inputs = Inputs(RandomTensor({6, 5}, rng), RandomTensor({4, 5}, rng), RandomTensor({4}, rng));
  REQUIRE(h.Forward().ok());
  OwnedTensor dy = RandomTensor({6, 4}, rng);
  OwnedTensor dx = ZerosLike(h.inputs[0].view()), dw = ZerosLike(h.inputs[1].view());
  OwnedTensor db = ZerosLike(h.inputs[2].view()), dw_only = ZerosLike(h.inputs[1].view());
  REQUIRE(h.Backward({dy.view()}, {dx.view(), dw.view(), db.view()}).ok());
  REQUIRE(h.Backward({dy.view()}, {Tensor(), dw_only.view(), Tensor()}).ok());
  for (int64_t i = 0; i < dw.numel(); ++i) REQUIRE(dw_only.f32()[i] == dw.f32()[i]);
}

TEST_CASE("gradcheck: every registered op is covered", "[kernels][gradcheck]") {
  // vocab_max, vocab_ce_stats and vocab_ce_loss take no gradient but the logits' (the chain
  // against cross_entropy in tensor_parallel_test.cc); sp_gather and sp_scatter compute nothing
  // (the plan's collectives do: runtime/worker/tp_graph_test.cc), nor does moe_all_to_all
  // (runtime/worker/trainer_moe_test.cc) or seq_all_to_all; seq_ce_stats and seq_ce_loss are
  // checked as a chain against cross_entropy (kernels/cpu/ulysses_test.cc); pipe_recv and pipe_send
  // move gradients between pipeline stages, not derivatives (kernels/cpu/pipeline_test.cc);
  // kv_attention and last_position are generation's forward only (against the full forward at
  // every decode step: runtime/generate/generator_test.cc).
  const std::set<std::string> covered = {"add",
                                         "attention",
                                         "bias_add",
                                         "cross_entropy",
                                         "dropout",
                                         "embedding",
                                         "gelu",
                                         "layernorm",
                                         "linear",
                                         "mul",
                                         "moe_router",
                                         "moe_dispatch",
                                         "expert_linear",
                                         "moe_combine",
                                         "moe_residual_mix",
                                         "moe_loss",
                                         "moe_all_to_all",
                                         "seq_chunk",
                                         "ulysses_heads",
                                         "ulysses_time",
                                         "seq_all_to_all",
                                         "seq_ce_stats",
                                         "seq_ce_loss",
                                         "position_embedding",
                                         "rmsnorm",
                                         "rope",
                                         "silu",
                                         "vocab_max",
                                         "vocab_ce_stats",
                                         "vocab_ce_loss",
                                         "sp_split",
                                         "sp_gather",
                                         "sp_scatter",
                                         "pipe_recv",
                                         "pipe_send",
                                         "kv_attention",
                                         "last_position",
                                         "reward_pair_loss",
                                         "ppo_actor_loss",
                                         "ppo_value_loss"};
  for (const std::string& op : RegisteredOps()) {
    INFO("op " << op << " has no gradient check");
    CHECK(covered.count(op) == 1);
  }
}

}  // namespace
}  // namespace ds::kernels
