// Every registered op with a backward is gradient-checked (gradcheck_util.h): the test walks
// the op registry, runs each op's cases from the tables here and in gradcheck_parallel_cases.cc,
// and fails for an op that has neither cases nor a reason in kNotChecked. The cases of the
// single-device ops are in this file; those of the parallel layouts (tensor, sequence, expert,
// pipeline) in gradcheck_parallel_cases.cc.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/gradcheck_util.h"
#include "kernels/registry.h"

namespace ds::kernels {
namespace testing {
void AddParallelChecks(GradcheckTable* table);  // gradcheck_parallel_cases.cc
void AddFamilyChecks(GradcheckTable* table);    // gradcheck_family_cases.cc
}  // namespace testing
namespace {

using namespace testing;  // NOLINT: the harness's helpers read as the test's own

// Ops without a gradient check here, each with the reason. Every other registered op must
// have cases in the table.
const std::map<std::string, std::string> kNotChecked = {
    {"kv_attention",
     "generation's forward only (no backward); checked against the full forward at every decode "
     "step in runtime/generate/generator_test.cc"},
    {"last_position", "generation's forward only (no backward): a row copy"},
    {"vocab_max",
     "no backward: the max only shifts the exponentials; vocab_ce_loss's backward carries the "
     "whole gradient (checked as that chain here)"},
    {"vocab_ce_stats", "no backward: vocab_ce_loss's backward carries it (checked as a chain)"},
    {"seq_ce_stats", "no backward: seq_ce_loss's backward carries it (checked as a chain)"},
    {"sp_scatter",
     "computes nothing either way: the plan's reduce-scatter writes its output and gradient "
     "(runtime/worker/tp_graph_test.cc)"},
    {"moe_all_to_all",
     "computes nothing either way: the plan's all-to-all moves its tokens and gradients "
     "(runtime/worker/trainer_moe_test.cc)"},
    {"seq_all_to_all",
     "computes nothing either way: the plan's all-to-all moves its tokens and gradients "
     "(runtime/worker/ulysses_test.cc)"},
    {"pipe_recv",
     "computes nothing either way: the plan's RECV writes its output, and the stage sends its "
     "gradient back (kernels/cpu/pipeline_test.cc)"},
};

void Elementwise(GradcheckTable* t) {
  (*t)["gelu"] = [] {
    std::mt19937 rng(1);
    CheckGradients({"gelu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))});
  };
  (*t)["silu"] = [] {
    std::mt19937 rng(1);
    CheckGradients({"silu", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))});
  };
  (*t)["add"] = [] {
    std::mt19937 rng(1);
    CheckGradients({"add", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  };
  (*t)["mul"] = [] {
    std::mt19937 rng(1);
    CheckGradients({"mul", {}, Inputs(RandomTensor({2, 9}, rng), RandomTensor({2, 9}, rng))});
  };
  (*t)["dropout"] = [] {  // training, a fixed seed
    std::mt19937 rng(1);
    Attrs a;
    a.SetFloat("p", 0.3);
    CheckGradients({"dropout", a, Inputs(RandomTensor({4, 33}, rng)), /*seed=*/1234});
  };
}

void EmbeddingsAndLinear(GradcheckTable* t) {
  (*t)["embedding"] = [] {
    std::mt19937 rng(2);
    CheckGradients(  // repeated ids
        {"embedding",
         {},
         Inputs(IntTensor({2, 5}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}), RandomTensor({10, 6}, rng))});
    Attrs a;  // vocab-parallel: ids outside the shard take no gradient
    a.SetInt("vocab_start", 4);
    a.SetInt("vocab_size", 12);
    CheckGradients(
        {"embedding", a,
         Inputs(IntTensor({2, 5}, {3, 4, 7, 11, 5, 9, 2, 6, 5, 8}), RandomTensor({4, 6}, rng))});
  };
  (*t)["bias_add"] = [] {
    std::mt19937 rng(2);
    CheckGradients({"bias_add", {}, Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({7}, rng))});
  };
  (*t)["column_add"] = [] {  // LoRA's join: a column range of a fused output, and all of it
    std::mt19937 rng(2);
    Attrs a;
    a.SetInt("begin", 3);
    a.SetFloat("scale", 0.75);
    CheckGradients(
        {"column_add", a, Inputs(RandomTensor({2, 3, 9}, rng), RandomTensor({2, 3, 4}, rng))});
    Attrs whole;
    whole.SetFloat("scale", 2.0);
    CheckGradients(
        {"column_add", whole, Inputs(RandomTensor({4, 5}, rng), RandomTensor({4, 5}, rng))});
  };
  (*t)["position_embedding"] = [] {
    std::mt19937 rng(2);
    CheckGradients({"position_embedding",
                    {},
                    Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng))});
    // At given positions (left padding: repeats), then with left pads [B].
    CheckGradients({"position_embedding",
                    {},
                    Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng),
                           IntTensor({2, 5}, {0, 0, 0, 1, 2, 3, 4, 5, 6, 7}))});
    CheckGradients(
        {"position_embedding",
         {},
         Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng), IntTensor({2}, {2, 0}))});
  };
  (*t)["linear"] = [] {
    std::mt19937 rng(2);
    CheckGradients(
        {"linear",
         {},
         Inputs(RandomTensor({2, 3, 7}, rng), RandomTensor({5, 7}, rng), RandomTensor({5}, rng))});
    CheckGradients({"linear", {}, Inputs(RandomTensor({4, 7}, rng), RandomTensor({5, 7}, rng))});
  };
}

void NormsRopeAttention(GradcheckTable* t) {
  (*t)["layernorm"] = [] {
    std::mt19937 rng(3);
    CheckGradients({"layernorm",
                    {},
                    Inputs(RandomTensor({2, 3, 16}, rng, -2, 2), RandomTensor({16}, rng),
                           RandomTensor({16}, rng))});
  };
  (*t)["rmsnorm"] = [] {
    std::mt19937 rng(3);
    CheckGradients(
        {"rmsnorm", {}, Inputs(RandomTensor({5, 16}, rng, -2, 2), RandomTensor({16}, rng))});
  };
  (*t)["rope"] = [] {
    std::mt19937 rng(4);
    Attrs a = HeadAttrs(4, 2);
    a.SetFloat("theta", 100.0);
    CheckGradients({"rope", a, Inputs(RandomTensor({2, 6, 8 * 8}, rng))});
    CheckGradients(
        {"rope", a,
         Inputs(RandomTensor({2, 3, 8 * 8}, rng), IntTensor({2, 3}, {0, 0, 1, 5, 6, 7}))});
    CheckGradients({"rope", a, Inputs(RandomTensor({2, 6, 8 * 8}, rng), IntTensor({2}, {0, 3}))});
  };
  // The qkv values are scaled up so the softmax is far from uniform.
  (*t)["attention"] = [] {
    std::mt19937 rng(5);
    CheckGradients({"attention", HeadAttrs(2, 2), Inputs(RandomTensor({2, 5, 6 * 4}, rng, -2, 2))});
    // GQA H=4 Hkv=2, T=70 (a partial second block).
    CheckGradients(
        {"attention", HeadAttrs(4, 2), Inputs(RandomTensor({2, 70, 8 * 8}, rng, -2, 2))});
    // Left pads: a padded query block, a pad-only row, one without.
    CheckGradients({"attention", HeadAttrs(4, 2),
                    Inputs(RandomTensor({3, 70, 8 * 8}, rng, -2, 2), IntTensor({3}, {5, 0, 66}))});
    // Packed documents: starts per token, a document boundary inside a query block and one
    // on a block edge (64), the second row one document.
    std::vector<int32_t> starts(2 * 70, 0);
    for (int i = 0; i < 70; ++i) starts[i] = i < 9 ? 0 : i < 30 ? 9 : i < 64 ? 30 : 64;
    CheckGradients({"attention", HeadAttrs(4, 2),
                    Inputs(RandomTensor({2, 70, 8 * 8}, rng, -2, 2), IntTensor({2, 70}, starts))});
    // B*Hkv below the thread count: the split backward.
    const int saved = omp_get_max_threads();
    for (int threads : {1, 4}) {
      omp_set_num_threads(threads);
      INFO("threads " << threads);
      CheckGradients(
          {"attention", HeadAttrs(2, 1), Inputs(RandomTensor({1, 150, 4 * 8}, rng, -2, 2))});
    }
    omp_set_num_threads(saved);
  };
}

// PPO's actor loss, away from the clip's edges (where the max switches branch): old log-probs
// offset by +-0.05 (inside the 0.2 clip) and +-0.5 (outside), masked positions too.
void PpoActor() {
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
  CheckGradients({"ppo_actor_loss", clip,
                  Inputs(CopyOf(logits.view()), IntTensor({2, 3}, tokens), CopyOf(old.view()),
                         CopyOf(a.view()), CopyOf(m.view()),
                         FloatTensor({2, 3}, {0.f, 2.5f, 0.f, 1.f, 3.f, 0.f}))});
  {  // The pretraining term alone (mask 0, weights 2): 2 x the tokens' cross-entropy.
    OpHarness ptx("ppo_actor_loss", clip);
    ptx.inputs.push_back(CopyOf(logits.view()));
    ptx.inputs.push_back(IntTensor({2, 3}, tokens));
    for (int k = 0; k < 3; ++k)
      ptx.inputs.push_back(FloatTensor({2, 3}, std::vector<float>(6, 0.f)));
    ptx.inputs.push_back(FloatTensor({2, 3}, std::vector<float>(6, 2.f)));
    REQUIRE(ptx.Forward().ok());
    OpHarness ce("cross_entropy", {});
    ce.inputs.push_back(CopyOf(logits.view()));
    ce.inputs.push_back(IntTensor({2, 3}, tokens));
    REQUIRE(ce.Forward().ok());
    CHECK(ptx.outputs[0].f32()[0] == Approx(2 * ce.outputs[0].f32()[0]).epsilon(1e-6));
  }
  CheckGradients({"ppo_actor_loss", clip,
                  Inputs(std::move(logits), IntTensor({2, 3}, tokens), std::move(old), std::move(a),
                         std::move(m))});
}

// PPO's value loss: old values offset by +-0.05 and +-0.5 around the 0.2 clip.
void PpoValue() {
  std::mt19937 rng(18);
  const float offsets[6] = {0.05f, -0.5f, -0.05f, 0.5f, 0.05f, 0.5f};
  OwnedTensor values = RandomTensor({2, 3, 1}, rng), old_v = RandomTensor({2, 3}, rng),
              ret = RandomTensor({2, 3}, rng, -2, 2);
  for (int64_t r = 0; r < 6; ++r) old_v.f32()[r] = values.f32()[r] - offsets[r];
  Attrs vclip;
  vclip.SetFloat("cliprange_value", 0.2);
  CheckGradients({"ppo_value_loss", vclip,
                  Inputs(std::move(values), std::move(old_v), std::move(ret),
                         IntTensor({2, 3}, {1, 1, 1, 1, 0, 1}))});
}

void Losses(GradcheckTable* t) {
  (*t)["cross_entropy"] = [] {  // with ignored targets
    std::mt19937 rng(6);
    Attrs a;
    a.SetInt("ignore_index", -1);
    CheckGradients({"cross_entropy", a,
                    Inputs(RandomTensor({2, 4, 11}, rng, -3, 3),
                           IntTensor({2, 4}, {3, -1, 0, 10, 7, 7, -1, 2}))});
  };
  // The reward model's pairwise loss: 2 pairs scored at their own positions (the gradient is 0
  // elsewhere, which the check sees too).
  (*t)["reward_pair_loss"] = [] {
    std::mt19937 rng(16);
    CheckGradients({"reward_pair_loss", Attrs(),
                    Inputs(RandomTensor({4, 3, 1}, rng, -2, 2),
                           IntTensor({4, 3}, {0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1}))});
  };
  (*t)["ppo_actor_loss"] = PpoActor;
  (*t)["ppo_value_loss"] = PpoValue;
}

GradcheckTable AllChecks() {
  GradcheckTable t;
  Elementwise(&t);
  EmbeddingsAndLinear(&t);
  NormsRopeAttention(&t);
  Losses(&t);
  AddParallelChecks(&t);
  AddFamilyChecks(&t);
  return t;
}

TEST_CASE("gradcheck: every registered op with a backward", "[kernels][gradcheck]") {
  const GradcheckTable checks = AllChecks();
  for (const auto& [op, reason] : kNotChecked) {  // no stale or contradictory entries
    INFO("kNotChecked lists " << op);
    CHECK(FindOp(op) != nullptr);
    CHECK(checks.count(op) == 0);
  }
  for (const auto& [op, fn] : checks) {
    INFO("the table has cases for " << op << ", which is not a registered op");
    CHECK(FindOp(op) != nullptr);
  }
  for (const std::string& op : RegisteredOps()) {
    if (kNotChecked.count(op)) continue;
    DYNAMIC_SECTION("op " << op) {
      if (checks.count(op) == 0) {
        FAIL_CHECK("op " << op
                         << " has no gradient check: add its cases to the table, or list it "
                            "in kNotChecked with the reason");
      } else {
        ResetCheckedOps();
        checks.at(op)();
        INFO("the cases listed for " << op << " do not check it");
        CHECK(CheckedOps().count(op) == 1);
      }
    }
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

}  // namespace
}  // namespace ds::kernels
