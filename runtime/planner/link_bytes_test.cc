// The bytes each rank sends split by link class (runtime/plan/link_bytes.h) on real plans: a
// data-parallel ring over 2 nodes x 2 crosses nodes at the two ranks whose successor is on the
// other node, one node sends nothing between nodes, one rank per node nothing inside; a
// pipeline's activations between stages on two nodes all cross; the split always sums to what
// the rank sends.
#include <catch2/catch.hpp>

#include "runtime/plan/link_bytes.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::planner {
namespace {

proto::PlanSummary Split(const proto::Plan& plan, const std::vector<int>& node_of) {
  proto::PlanSummary s = plan::SummarizePlan(plan, "job.yaml");
  plan::AddLinkClasses(plan, node_of, &s);
  for (const proto::RankSummary& r : s.ranks())
    CHECK(r.intra_node_sent_bytes() + r.inter_node_sent_bytes() == r.comm_sent_bytes());
  return s;
}

TEST_CASE("link classes: a ring over two nodes crosses at two hops", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  for (int stage : {0, 2, 3}) {
    INFO("stage " << stage);
    const proto::Plan plan = testing::MustPlan(g, 4, testing::BaseConfig(stage));
    const proto::PlanSummary two = Split(plan, {0, 0, 1, 1});
    CHECK(two.nodes() == 2);
    REQUIRE(two.ranks(0).comm_sent_bytes() > 0);
    CHECK(two.ranks(0).inter_node_sent_bytes() == 0);  // 0 -> 1: same node
    CHECK(two.ranks(1).inter_node_sent_bytes() == two.ranks(1).comm_sent_bytes());  // 1 -> 2
    CHECK(two.ranks(2).inter_node_sent_bytes() == 0);
    CHECK(two.ranks(3).inter_node_sent_bytes() == two.ranks(3).comm_sent_bytes());  // 3 -> 0
    const proto::PlanSummary one = Split(plan, {0, 0, 0, 0}), four = Split(plan, {0, 1, 2, 3});
    for (const proto::RankSummary& r : one.ranks()) CHECK(r.inter_node_sent_bytes() == 0);
    for (const proto::RankSummary& r : four.ranks()) CHECK(r.intra_node_sent_bytes() == 0);
    CHECK(plan::FormatLinkClasses(two).find("sent per step by link class (2 nodes)") !=
          std::string::npos);
  }
}

TEST_CASE("link classes: a pipeline's activations between nodes all cross", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  plan::PlanConfig c = testing::BaseConfig(0);
  c.pipeline = 2;
  c.gradient_accumulation_steps = 4;
  const proto::Plan plan = testing::MustPlan(g, 2, c);
  const proto::PlanSummary s = Split(plan, {0, 1});
  for (const proto::RankSummary& r : s.ranks()) {
    CHECK(r.inter_node_sent_bytes() > 0);
    CHECK(r.intra_node_sent_bytes() == 0);
  }
  const proto::PlanSummary one = Split(plan, {0, 0});
  for (const proto::RankSummary& r : one.ranks()) CHECK(r.inter_node_sent_bytes() == 0);
}

}  // namespace
}  // namespace ds::planner
