// Each rank's cut as the plan records it, and the graph CutRankGraph builds from it: for every
// layout, every rank's cut graph has exactly the parameters (names, order, flat size) its plan
// lays out, which is what the worker checks before it allocates a byte.
#include "runtime/planner/rank_cut.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/graph/model_builder.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/plan/plan_view.h"
#include "runtime/planner/plan_test_util.h"
#include "zero/param_store.h"

namespace ds::planner {
namespace {

struct Layout {
  const char* model;
  int world, tp, pp, ep, sp, v;
  bool sequence_parallel;
};

plan::PlanConfig ConfigOf(const Layout& l) {
  plan::PlanConfig c = testing::BaseConfig(1, DType::kF32);
  c.tensor = l.tp;
  c.pipeline = l.pp;
  c.expert = l.ep;
  c.ulysses = l.sp;
  c.sequence_parallel = l.sequence_parallel;
  c.gradient_accumulation_steps = 2;
  c.seq_len = 16;
  if (l.v > 1) {
    c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
    c.virtual_stages = l.v;
  }
  return c;
}

std::vector<std::string> PlannedNames(const proto::Plan& view) {
  std::vector<std::string> names;
  for (const proto::PlanParam& p : view.model().params()) names.push_back(p.name());
  return names;
}

std::vector<std::string> GraphNames(const Graph& g) {
  std::vector<std::string> names;
  for (int t : g.Params()) names.push_back(g.tensors[t].name);
  return names;
}

}  // namespace

TEST_CASE("Every rank's cut graph holds the parameters its plan lays out", "[plan][cut]") {
  const std::vector<Layout> layouts = {
      {"gpt2-tiny", 2, 2, 1, 1, 1, 1, false},     {"gpt2-tiny", 2, 2, 1, 1, 1, 1, true},
      {"gpt2-tiny", 2, 1, 2, 1, 1, 1, false},     {"gpt2-L4", 2, 1, 2, 1, 1, 2, false},
      {"gpt2-tiny", 8, 2, 2, 1, 1, 1, false},     {"gpt2-tiny", 2, 1, 1, 1, 2, 1, false},
      {"gpt2-moe-tiny", 2, 1, 1, 2, 1, 1, false}, {"gpt2-moe-tiny", 4, 2, 1, 2, 1, 1, false},
      {"gpt2-moe-tiny", 4, 1, 2, 2, 1, 1, false},
  };
  for (const Layout& l : layouts) {
    INFO(l.model << " world " << l.world << " tp " << l.tp << " pp " << l.pp << " ep " << l.ep
                 << " sp " << l.sp << " v " << l.v << (l.sequence_parallel ? " +SP" : ""));
    const Graph whole = std::string(l.model) == "gpt2-L4"  // 4 stages of one block each
                            ? testing::SizedGraph("gpt2", 4, 64, 256, 64)
                            : testing::PresetGraph(l.model);
    const plan::PlanConfig c = ConfigOf(l);
    auto topo = plan::TopologyFor(l.world, c);
    REQUIRE(topo.ok());
    auto made = MakePlan(whole, *topo, c);
    INFO(made.status().ToString());
    REQUIRE(made.ok());
    REQUIRE(made->ranks_size() == l.world);
    for (int r = 0; r < l.world; ++r) {
      INFO("rank " << r);
      const proto::RankCut& cut = made->ranks(r).cut();
      CHECK(cut.rank() == r);
      auto part = CutRankGraph(whole, cut, c);
      INFO(part.status().ToString());
      REQUIRE(part.ok());
      const proto::Plan view = plan::RankView(*made, r);
      CHECK(GraphNames(part->graph) == PlannedNames(view));
      const zero::ParamStore store(part->graph, DType::kF32);
      CHECK(store.total_elements() == view.model().flat_elements());
      CHECK((part->sliced != nullptr) == (l.tp > 1 || l.ep > 1));
      CHECK(part->chunks.size() == static_cast<size_t>(l.pp > 1 ? l.v : 0));
      CHECK(part->stage == (l.pp > 1 ? cut.stage() : -1));
    }
  }
}

TEST_CASE("A rank's cut follows the grid and says what the rank runs", "[plan][cut]") {
  plan::PlanConfig c = testing::BaseConfig(1, DType::kF32);
  c.tensor = 2;
  c.pipeline = 2;
  const plan::Topology topo{8, 2, 2, 2};
  auto grid = plan::ParallelGrid::Create(8, 2, 2);
  REQUIRE(grid.ok());
  const Graph whole = testing::PresetGraph("gpt2-tiny");
  for (int r = 0; r < 8; ++r) {
    auto cut = RankCutOf(topo, c, r);
    REQUIRE(cut.ok());
    const plan::GridCoord at = grid->CoordOf(r);
    CHECK(cut->tp_rank() == at.tp);
    CHECK(cut->stage() == at.pp);
    CHECK(cut->dp_rank() == at.dp);
    CHECK(cut->dp() == 2);
    auto part = CutRankGraph(whole, *cut, c);
    REQUIRE(part.ok());
    const std::vector<std::string> lines = DescribeRankCut(*part, c);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "tensor parallel: rank " + std::to_string(r) + " is tp rank " +
                          std::to_string(at.tp) + " of 2, dp rank " + std::to_string(at.dp) +
                          " of 2");
    CHECK(lines[1].rfind("pipeline: rank " + std::to_string(r) + " runs stage " +
                             std::to_string(at.pp) + " of 2 (1 chunk, ",
                         0) == 0);
  }
}

}  // namespace ds::planner
