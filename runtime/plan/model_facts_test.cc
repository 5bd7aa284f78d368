#include "runtime/plan/model_facts.h"

#include <catch2/catch.hpp>

#include "kernels/registry.h"
#include "runtime/graph/validate.h"
#include "runtime/planner/plan_test_util.h"
#include "zero/param_store.h"

namespace ds::plan {
namespace {

using planner::testing::PresetGraph;

TEST_CASE("ModelFacts: flat layout is ParamStore's", "[plan]") {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "gpt2-small-test"}) {
    INFO(name);
    Graph g = PresetGraph(name);
    auto facts = AnalyzeModel(g, 2, 16);
    REQUIRE(facts.ok());
    zero::ParamStore store(g, DType::kBF16);
    REQUIRE(facts->params.size() == store.slots().size());
    for (size_t i = 0; i < store.slots().size(); ++i) {
      CHECK(facts->params[i].name == store.slots()[i].name);
      CHECK(facts->params[i].offset == store.slots()[i].offset);
      CHECK(facts->params[i].numel == store.slots()[i].numel);
    }
    CHECK(facts->flat_elements == store.total_elements());
    CHECK(facts->num_parameters == store.num_parameters());
    CHECK(facts->num_parameters == g.NumParameters());
  }
}

TEST_CASE("ModelFacts: blocks, node ranges and reader blocks", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");  // 4 blocks, tied embeddings
  auto facts = AnalyzeModel(g, 2, 16);
  REQUIRE(facts.ok());
  REQUIRE(facts->blocks.size() == 6);
  int next = 0;
  for (size_t i = 0; i < facts->blocks.size(); ++i) {
    CHECK(facts->blocks[i].block == static_cast<int>(i) - 1);
    CHECK(facts->blocks[i].node_begin == next);
    next = facts->blocks[i].node_end;
  }
  CHECK(next == static_cast<int>(g.nodes.size()));
  const ParamFacts& wte = facts->params[0];
  REQUIRE(wte.name == "wte");
  CHECK(wte.blocks == std::vector<int>{-1, 4});
  CHECK(facts->params[2].blocks == std::vector<int>{0});  // h.0.ln_1.weight
  // Block 4 (ln_f + head) reads the tied embedding too.
  CHECK(facts->blocks[5].param_elements == 8192 * 256 + 2 * 256);

  Graph llama = PresetGraph("llama-tiny");
  auto lf = AnalyzeModel(llama, 2, 16);
  REQUIRE(lf.ok());
  CHECK(lf->params.back().name == "lm_head.weight");
  CHECK(lf->params.back().blocks == std::vector<int>{2});
}

TEST_CASE("ModelFacts: activations are the saved bytes, each tensor once", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  const int64_t B = 4, T = 256;
  auto facts = AnalyzeModel(g, B, T);
  REQUIRE(facts.ok());
  auto specs = InferTensorSpecs(g, {{"batch", B}, {"seq", T}}, "test");
  REQUIRE(specs.ok());
  int64_t per_node = 0, params = 0;
  for (const NodeInfo& n : g.nodes) {
    const kernels::OpDef* def = kernels::FindOp(n.op);
    REQUIRE(def != nullptr);
    std::vector<TensorSpec> in, out;
    for (int t : n.inputs) {
      in.push_back((*specs)[t]);
      if (g.tensors[t].role == TensorRole::kParam &&
          ((def->backward_reads_inputs >> (in.size() - 1)) & 1u))
        params += (*specs)[t].nbytes();
    }
    for (int t : n.outputs) out.push_back((*specs)[t]);
    per_node += kernels::SavedActivationBytes(*def, n.attrs, in, out);
  }
  int64_t total = 0;
  for (const BlockFacts& b : facts->blocks) total += b.activation_bytes;
  CHECK(total > 0);
  // Without parameters and the token ids, and with shared tensors once, never more.
  CHECK(total <= per_node - params);
  // The logits (B x T x vocab fp32) are kept for the head's backward.
  CHECK(facts->blocks.back().activation_bytes >= B * T * 8192 * 4);
  CHECK(facts->input_bytes == 2 * B * T * 4);
  // Activations scale with the micro-batch, all but the scalar loss (one 64-byte arena slot).
  auto half = AnalyzeModel(g, B / 2, T);
  REQUIRE(half.ok());
  int64_t half_total = 0;
  for (const BlockFacts& b : half->blocks) half_total += b.activation_bytes;
  CHECK((half_total - 64) * 2 == total - 64);
}

TEST_CASE("ModelFacts: rejects graphs it cannot plan", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  SECTION("sequence longer than the position table") {
    auto facts = AnalyzeModel(g, 2, 128);
    REQUIRE_FALSE(facts.ok());
    CHECK_THAT(facts.status().message(), Catch::Contains("seq_len 128"));
  }
  SECTION("nodes not grouped by block") {
    g.nodes.back().block = 0;
    auto facts = AnalyzeModel(g, 2, 16);
    REQUIRE_FALSE(facts.ok());
    CHECK_THAT(facts.status().message(), Catch::Contains("not grouped by block"));
  }
}

}  // namespace
}  // namespace ds::plan
