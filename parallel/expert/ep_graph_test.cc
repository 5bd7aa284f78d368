// The all-to-all layouts' plans: expert parallelism agrees on the capacity (a max all-reduce on
// the ep group) before any all-to-all when nothing is dropped, and only then; every layer's
// tokens go out and come back in forward and backward; Ulysses exchanges q, k, v and the output
// of every attention and sums the loss's stats over sp; every group's members issue the same
// collectives in the same order (no deadlock by construction).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "parallel/expert/ep_graph.h"
#include "runtime/plan/collective_check.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::parallel {
namespace {

// The planner these cuts are planned by.
using plan::CheckCollectiveOrder;
using plan::PlanConfig;
using plan::TopologyFor;
using planner::MakePlan;
namespace testing = planner::testing;

using Ins = proto::Instruction;

Graph MoeGraph(bool drop) {
  ModelSpec s = ModelPreset("gpt2-moe-tiny").value();  // 4 experts in block 1 of 2
  s.moe.drop_tokens = drop;
  return BuildModelGraph(s).value();
}

proto::Plan Plan(const Graph& g, int world, int ep, int sp, int stage) {
  PlanConfig c = planner::testing::BaseConfig(stage, DType::kF32);
  c.expert = ep;
  c.ulysses = sp;
  c.micro_batch_size = 2;
  c.gradient_accumulation_steps = 2;
  c.seq_len = 16;
  auto topo = TopologyFor(world, c);
  REQUIRE(topo.ok());
  auto plan = planner::MakePlan(g, *topo, c);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

TEST_CASE("ep plan: capacity agreed over ep before the all-to-alls only without drops",
          "[plan][moe]") {
  for (bool drop : {false, true}) {
    INFO("drop_tokens " << drop);
    const proto::Plan plan = Plan(MoeGraph(drop), 4, 2, 1, 2);
    REQUIRE(CheckCollectiveOrder(plan).ok());
    for (const proto::RankPlan& rp : plan.ranks()) {
      int agree = 0, exchanges = 0;
      bool agreed_first = true;
      for (const Ins& in : rp.instructions()) {
        if (in.kind() == Ins::ACT_ALL_REDUCE && in.collective().reduce_max()) {
          ++agree;
          CHECK(in.activation().name() == "h.1.mlp.capacity");
          CHECK(in.collective().group() == (rp.rank() < 2 ? "ep.0" : "ep.1"));
        }
        if (in.kind() == Ins::ACT_ALL_TO_ALL) {
          ++exchanges;
          agreed_first = agreed_first && (drop || agree > 0);
          CHECK(in.activation().capacity_tensor() >= 0);
        }
      }
      CHECK(agree == (drop ? 0 : 2));  // one per micro-batch
      CHECK(exchanges == 2 * 2 * 2);   // out and back, forward and backward, 2 micro-batches
      CHECK(agreed_first);
    }
  }
}

// PR-MoE: the dense branch runs while the tokens travel (moe_overlap.h). In forward the
// dispatch's all-to-all is posted before the dense MLP and coefficient and waited for before the
// experts; in backward the gradients' all-to-all is posted before their backward and waited for
// before the dispatch's. The experts' return trip has nothing to overlap and stays synchronous.
TEST_CASE("ep plan: PR-MoE's dense branch overlaps the dispatch all-to-all", "[plan][moe]") {
  ModelSpec s = ModelPreset("gpt2-moe-tiny").value();
  s.moe.use_residual = true;
  const Graph g = BuildModelGraph(s).value();
  TpLocalGraph local = TensorParallelGraph(g, 1, 0).value();
  REQUIRE(ApplyExpertParallel(2, 0, &local).ok());
  std::vector<std::string> ops;
  for (const NodeInfo& n : local.graph.nodes) ops.push_back(n.op);
  const auto dispatch = std::find(ops.begin(), ops.end(), "moe_dispatch") - ops.begin();
  const std::vector<std::string> window(ops.begin() + dispatch, ops.begin() + dispatch + 6);
  CHECK(window == std::vector<std::string>{"moe_dispatch", "linear", "gelu", "linear", "linear",
                                           "moe_all_to_all"});
  const proto::Plan plan = Plan(g, 4, 2, 1, 2);
  REQUIRE(CheckCollectiveOrder(plan).ok());
  for (const proto::RankPlan& rp : plan.ranks()) {
    const auto& list = rp.instructions();
    int posted = 0, synchronous = 0;
    for (int i = 0; i < list.size(); ++i) {
      if (list[i].kind() != Ins::ACT_ALL_TO_ALL) continue;
      if (!list[i].async()) {
        ++synchronous;
        continue;
      }
      ++posted;
      // The next instruction computes the branch; a later one of the same kind waits.
      REQUIRE(i + 2 < list.size());
      const Ins::Kind compute = list[i + 1].kind();
      CHECK((compute == Ins::FORWARD || compute == Ins::BACKWARD));
      CHECK(list[i + 1].wait_for_size() == 0);
      CHECK(list[i + 2].kind() == compute);
      CHECK(std::count(list[i + 2].wait_for().begin(), list[i + 2].wait_for().end(), i) == 1);
    }
    CHECK(posted == 2 * 2);       // forward and backward, 2 micro-batches
    CHECK(synchronous == 2 * 2);  // the return trips
  }
}

TEST_CASE("ulysses plan: four all-to-alls per attention and micro-batch, the loss summed once",
          "[plan][ulysses]") {
  const Graph g = planner::testing::SizedGraph("llama", 2, 32, 64, 16);
  const proto::Plan plan = Plan(g, 4, 1, 2, 1);
  REQUIRE(CheckCollectiveOrder(plan).ok());
  CHECK(plan.topology().sp() == 2);
  for (const proto::RankPlan& rp : plan.ranks()) {
    int exchanges = 0, sums = 0;
    for (const Ins& in : rp.instructions()) {
      if (in.kind() == Ins::ACT_ALL_TO_ALL) {
        ++exchanges;
        CHECK(in.collective().group().rfind("sp.", 0) == 0);
      }
      if (in.kind() == Ins::ACT_ALL_REDUCE) ++sums;
      if (in.kind() == Ins::BACKWARD && in.computes_loss()) CHECK(in.mean_over() == 2 * 4 / 2);
    }
    CHECK(exchanges == 2 * 2 * 2 * 2);  // q k v in, output out; forward, backward; 2 layers, 2 mb
    CHECK(sums == 2);                   // the loss's stats, per micro-batch
  }
}

TEST_CASE("ulysses and expert layouts the planner refuses", "[plan][ulysses][moe]") {
  PlanConfig c = planner::testing::BaseConfig(0, DType::kF32);
  c.ulysses = 2;
  c.seq_len = 15;
  auto bad =
      planner::MakePlan(planner::testing::SizedGraph("gpt2", 2, 32, 64, 16), *TopologyFor(2, c), c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("does not divide seq_len 15") != std::string::npos);
  c.seq_len = 16;
  c.ulysses = 1;
  c.expert = 2;
  bad =
      planner::MakePlan(planner::testing::SizedGraph("gpt2", 2, 32, 64, 16), *TopologyFor(2, c), c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("needs a mixture-of-experts model") != std::string::npos);
  c.expert = 1;
  c.tensor = 2;
  c.sequence_parallel = true;
  bad = planner::MakePlan(MoeGraph(true), *TopologyFor(2, c), c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("sequence_parallel with a mixture-of-experts model") !=
        std::string::npos);
  c.tensor = 1;
  c.sequence_parallel = false;
  c.pipeline = 2;  // planned: each stage adds its own aux terms (pipe_graph.h)
  REQUIRE(planner::MakePlan(MoeGraph(true), *TopologyFor(2, c), c).ok());
  c.pipeline = 1;
  c.ulysses = 2;
  bad = planner::MakePlan(MoeGraph(true), *TopologyFor(2, c), c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("parallel.ulysses 2 with a mixture-of-experts model") !=
        std::string::npos);
}

}  // namespace
}  // namespace ds::parallel
