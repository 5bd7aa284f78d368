// Expert parallelism's storage: each rank's plan holds its E / ep experts only; ZeRO splits them
// over the dp / ep ranks holding the same experts (the edp group) and everything else over dp.
// Every element is stepped, and counted in the norm, by exactly one rank of its group; every
// collective over an edp group touches experts only. With tensor parallelism each tp rank routes
// its chunk of the tokens.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "parallel/expert/ep_graph.h"
#include "runtime/graph/validate.h"
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
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

proto::Plan Plan(int world, int ep, int stage) {
  ModelSpec s = ModelPreset("gpt2-moe-tiny").value();  // 4 experts in block 1 of 2
  const Graph g = BuildModelGraph(s).value();
  PlanConfig c = planner::testing::BaseConfig(stage, DType::kF32);
  c.expert = ep;
  c.micro_batch_size = 2;
  c.gradient_accumulation_steps = 2;
  c.seq_len = 16;
  c.reduce_bucket_size = 4000;
  c.allgather_bucket_size = 4000;
  c.param_persistence_threshold = 100;
  auto plan = planner::MakePlan(g, *TopologyFor(world, c), c);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

bool IsExpert(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// The flat ranges of the expert (or the other) parameters, padding included.
Ranges Region(const proto::Plan& plan, bool expert) {
  Ranges out;
  const auto& params = plan.model().params();
  for (int i = 0; i < params.size(); ++i) {
    if (IsExpert(params[i].name()) != expert) continue;
    const int64_t end =
        i + 1 < params.size() ? params[i + 1].offset() : plan.model().flat_elements();
    if (!out.empty() && out.back().second == params[i].offset())
      out.back().second = end;
    else
      out.push_back({params[i].offset(), end});
  }
  return out;
}

// [b, e) ranges intersected with `region`, sorted and merged.
Ranges Within(const Ranges& ranges, const Ranges& region) {
  Ranges out;
  for (auto [b, e] : ranges)
    for (auto [rb, re] : region) {
      const int64_t lo = std::max(b, rb), hi = std::min(e, re);
      if (lo < hi) out.push_back({lo, hi});
    }
  std::sort(out.begin(), out.end());
  Ranges merged;
  for (auto r : out) {
    if (!merged.empty()) CHECK(r.first >= merged.back().second);  // no element twice
    if (!merged.empty() && merged.back().second == r.first)
      merged.back().second = r.second;
    else
      merged.push_back(r);
  }
  return merged;
}

Ranges FlatRanges(const proto::RankPlan& rp, Ins::Kind kind) {
  Ranges out;
  for (const Ins& in : rp.instructions())
    if (in.kind() == kind)
      for (const proto::ParamRange& r : in.ranges())
        out.push_back({r.offset(), r.offset() + r.count()});
  return out;
}

TEST_CASE("ep plan: a rank holds its experts, sharded over the ranks holding the same ones",
          "[plan][moe]") {
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage " << stage);
    const proto::Plan one = Plan(4, 1, stage), two = Plan(4, 2, stage);
    REQUIRE(CheckCollectiveOrder(two).ok());
    // Each rank's expert tensors are half the whole ones; the rest are whole.
    std::map<std::string, int64_t> whole;
    for (const proto::PlanParam& p : one.model().params()) whole[p.name()] = p.numel();
    int experts = 0;
    for (const proto::PlanParam& p : two.model().params()) {
      CHECK(p.numel() * (IsExpert(p.name()) ? 2 : 1) == whole.at(p.name()));
      experts += IsExpert(p.name());
    }
    CHECK(experts == 4);
    // edp.0 = dp ranks {0, 2} hold experts 0-1, edp.1 = {1, 3} experts 2-3.
    std::map<std::string, std::vector<int>> groups;
    for (const proto::ProcessGroup& g : two.groups())
      groups[g.name()] = {g.ranks().begin(), g.ranks().end()};
    CHECK(groups.at("edp.0") == std::vector<int>{0, 2});
    CHECK(groups.at("edp.1") == std::vector<int>{1, 3});
    for (const proto::PartitionUnit& u : two.partition().units())
      for (const proto::PlanParam& p : two.model().params())
        if (p.offset() >= u.offset() && p.offset() < u.offset() + u.count())
          CHECK(IsExpert(p.name()) == u.expert());
    // Collectives on an edp group move experts only, the others none.
    const Ranges expert = Region(two, true), dense = Region(two, false);
    for (const proto::RankPlan& rp : two.ranks()) {
      const std::string edp = rp.rank() % 2 == 0 ? "edp.0" : "edp.1";
      for (const Ins& in : rp.instructions()) {
        const bool zero = in.kind() == Ins::ALL_REDUCE || in.kind() == Ins::REDUCE_SCATTER ||
                          in.kind() == Ins::ALL_GATHER || in.kind() == Ins::GATHER_PARAMS;
        if (!zero) continue;
        const bool on_edp = in.collective().group() == edp;
        CHECK((on_edp || in.collective().group() == "dp"));
        Ranges mine;
        for (const proto::ParamRange& r : in.ranges())
          if (r.count() > 0) mine.push_back({r.offset(), r.offset() + r.count()});
        CHECK(Within(mine, on_edp ? dense : expert).empty());
        if (in.kind() == Ins::REDUCE_SCATTER || in.kind() == Ins::GATHER_PARAMS)
          CHECK(in.collective().rank_counts_size() == (on_edp ? 2 : 4));
      }
    }
    // Stepped once: the experts by one rank of each edp group, the rest by one of the four.
    // The norm (stages 0-1: flat ranges) the same way.
    std::vector<Ins::Kind> kinds = {Ins::OPTIMIZER_STEP};
    if (stage < 2) kinds.push_back(Ins::GRAD_NORM_REDUCE);
    for (Ins::Kind kind : kinds) {
      if (stage == 0 && kind == Ins::OPTIMIZER_STEP) continue;  // every rank steps everything
      INFO(Ins::Kind_Name(kind));
      Ranges all, group0, group1;
      for (const proto::RankPlan& rp : two.ranks()) {
        const Ranges r = FlatRanges(rp, kind);
        all.insert(all.end(), r.begin(), r.end());
        (rp.rank() % 2 == 0 ? group0 : group1)
            .insert((rp.rank() % 2 == 0 ? group0 : group1).end(), r.begin(), r.end());
      }
      CHECK(Within(all, dense) == dense);
      CHECK(Within(group0, expert) == expert);
      CHECK(Within(group1, expert) == expert);
    }
    // Less to keep per rank than with every expert on every rank: model states at stages 0-2;
    // at stage 3 (where ZeRO splits everything four ways either way) the gathered experts.
    if (stage < 3)
      CHECK(two.ranks(0).memory().model_state_bytes() < one.ranks(0).memory().model_state_bytes());
    else
      CHECK(two.ranks(0).memory().peak_bytes() < one.ranks(0).memory().peak_bytes());
  }
}

TEST_CASE("ep plan: with ep = dp the experts' collectives are local", "[plan][moe]") {
  const proto::Plan plan = Plan(2, 2, 2);
  for (const proto::RankPlan& rp : plan.ranks())
    for (const Ins& in : rp.instructions())
      if (in.collective().group().rfind("edp.", 0) == 0)
        CHECK(in.collective().placement() == proto::LOCAL);
}

}  // namespace
}  // namespace ds::parallel

namespace ds::parallel {
namespace {

// With tensor parallelism each tp rank routes, exchanges and computes only its half of the
// tokens (the duplicates dropped), and all-gathers the layer's output over tp after the combine.
TEST_CASE("ep plan: tp ranks route their chunk of the tokens", "[plan][moe][tp]") {
  const Graph g = BuildModelGraph(ModelPreset("gpt2-moe-tiny").value()).value();
  for (int tp_rank : {0, 1}) {
    auto local = TensorParallelGraph(g, 2, tp_rank);
    REQUIRE(local.ok());
    REQUIRE(ApplyExpertParallel(2, 1, &*local, 2, tp_rank).ok());
    CHECK(local->aux_per_rank);
    auto specs = InferTensorSpecs(local->graph, {{"batch", 2}, {"seq", 16}}, "test");
    INFO(specs.status().ToString());
    REQUIRE(specs.ok());
    int splits = 0, gathers = 0;
    for (const NodeInfo& n : local->graph.nodes) {
      if (n.op == "moe_router") CHECK((*specs)[n.outputs[0]].shape == Shape{16, 1});  // of 32
      if (n.op == "moe_combine") CHECK((*specs)[n.outputs[0]].shape == Shape{16, 64});
      splits += n.op == "sp_split";
      if (n.op != "sp_gather") continue;
      ++gathers;
      CHECK(n.attrs.Int("grad_chunk", 0) == 1);
      CHECK((*specs)[n.outputs[0]].shape == Shape{2, 16, 64});
    }
    CHECK(splits == 1);
    CHECK(gathers == 1);
    // The gate and the experts' gradients are each rank's part, summed over tp.
    std::set<std::string> partial;
    for (int t : local->sp_params) partial.insert(local->graph.tensors[t].name);
    CHECK(partial.count("h.1.mlp.gate.weight"));
    CHECK(partial.count("h.1.mlp.experts.fc.weight"));
  }
}

}  // namespace
}  // namespace ds::parallel
