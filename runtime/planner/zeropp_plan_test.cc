// ZeRO++ in the plan (zero/README.md Note [ZeRO++]) on 2 nodes x 2 ranks: hpZ's first gather of
// each unit fills the secondary partition and every later one stays inside the hpz group (one
// node), with the secondary's bytes in the plan's memory; qwZ's gathers and qgZ's reductions
// carry their quantization and (qgZ) the two all-to-all groups; each part cuts the bytes between
// nodes, all three at least 3x on a GPT-2 shape; qgZ alone goes inside the node first where the
// plan knows the nodes; what cannot work is refused.
#include <catch2/catch.hpp>

#include <set>

#include "runtime/plan/link_bytes.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/planner/plan_test_util.h"
#include "runtime/planner/rates_test_util.h"
#include "runtime/planner/step_sim.h"
#include "runtime/planner/transfer_costs.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;

// Blocks release their units after use (max_reuse_distance 0), so backward gathers them again.
plan::PlanConfig ZeroPP(int hpz, bool qw, bool qg, DType dtype = DType::kBF16) {
  plan::PlanConfig c = testing::BaseConfig(3, dtype);
  c.param_persistence_threshold = 100;
  c.max_reuse_distance = 0;
  c.hpz_partition_size = hpz;
  c.quantized_weight_bits = qw ? 8 : 0;
  c.quantized_gradient_bits = qg ? 4 : 0;
  return c;
}

// The bytes all ranks send to the other node per step, ranks {0, 1} and {2, 3} on two nodes
// (a ring's hops cross at ranks 1 and 3 only).
int64_t BetweenNodes(const proto::Plan& plan) {
  int64_t sum = 0;
  for (int r = 0; r < 4; ++r) sum += plan::RankLinkBytes(plan, r, {0, 0, 1, 1}).inter;
  return sum;
}

const proto::ProcessGroup* Group(const proto::Plan& plan, const std::string& name) {
  for (const proto::ProcessGroup& g : plan.groups())
    if (g.name() == name) return &g;
  return nullptr;
}

TEST_CASE("hpZ: a unit's later gathers stay in its node, from the secondary", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  const proto::Plan plan = testing::MustPlan(g, 4, ZeroPP(2, false, false));
  CHECK(plan.settings().hpz_partition_size() == 2);
  int64_t secondary = 0;
  for (const proto::PartitionUnit& u : plan.partition().units()) {
    if (u.persistent()) continue;
    CHECK(u.secondary_chunk() * 2 >= u.count());
    CHECK(u.secondary_chunk() % 16 == 0);
    CHECK(u.secondary_offset() == secondary);
    secondary += u.secondary_chunk();
  }
  CHECK(plan.partition().secondary_elements() == secondary);
  bool buffer = false;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.kind() == proto::PlanBuffer::PARAM_SECONDARY) {
      buffer = true;
      CHECK(b.bytes() == secondary * 2);  // bf16
      CHECK(b.whole_step());
    }
  CHECK(buffer);
  for (const proto::RankPlan& rp : plan.ranks()) {
    std::set<int> filled;
    int later = 0;
    for (const Ins& ins : rp.instructions()) {
      if (ins.kind() == Ins::GATHER_PARAMS) {
        CHECK(ins.fill_secondary());
        for (int u : ins.units()) CHECK(filled.insert(u).second);  // once per step
      }
      if (ins.kind() != Ins::GATHER_SECONDARY) continue;
      ++later;
      for (int u : ins.units()) CHECK(filled.count(u));
      const proto::ProcessGroup* grp = Group(plan, ins.collective().group());
      REQUIRE(grp);
      CHECK(grp->kind() == "hpz");
      CHECK(grp->ranks_size() == 2);
      CHECK(grp->ranks(0) / 2 == rp.rank() / 2);  // the rank's node: consecutive ranks
    }
    CHECK(later > 0);
  }
  const std::string table = plan::FormatPlanSummary(plan::SummarizePlan(plan, "job.yaml"));
  CHECK(table.find("ZeRO++: hpZ over 2 consecutive dp ranks") != std::string::npos);
  const std::string all = plan::FormatPlanSummary(
      plan::SummarizePlan(testing::MustPlan(g, 4, ZeroPP(2, true, true)), "job.yaml"));
  CHECK(all.find("qwZ int8 parameter gathers") != std::string::npos);
  CHECK(all.find("qgZ int4 gradient all-to-alls, one fp32 scale per 256 values, inside runs of 2 "
                 "dp ranks (a node's), then across them") != std::string::npos);
  CHECK(table.find("hpZ secondary partition") != std::string::npos);
  CHECK(table.find("collective staging (peak)") != std::string::npos);
  const proto::Plan plain = testing::MustPlan(g, 4, ZeroPP(1, false, false));
  CHECK(BetweenNodes(plan) < BetweenNodes(plain));
  auto peak = [](const proto::Plan& p) { return p.ranks(0).memory().peak_bytes(); };
  CHECK(peak(plan) >= peak(plain) + secondary * 2);
}

TEST_CASE("qwZ and qgZ: quantized gathers, and reductions by two all-to-alls", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  const proto::Plan plan = testing::MustPlan(g, 4, ZeroPP(2, true, true));
  int gathers = 0, reductions = 0;
  for (const Ins& ins : plan.ranks(1).instructions()) {
    if (ins.kind() == Ins::GATHER_PARAMS || ins.kind() == Ins::GATHER_SECONDARY) {
      ++gathers;
      CHECK(ins.quantize().bits() == 8);
      CHECK(ins.quantize().block() > 0);
    }
    if (ins.kind() == Ins::REDUCE_SCATTER) {
      ++reductions;
      CHECK(ins.quantize().bits() == 4);
      REQUIRE(ins.collective().hierarchy_size() == 2);
      const proto::ProcessGroup* inside = Group(plan, ins.collective().hierarchy(0));
      const proto::ProcessGroup* across = Group(plan, ins.collective().hierarchy(1));
      REQUIRE(inside);
      REQUIRE(across);
      CHECK(std::vector<int>(inside->ranks().begin(), inside->ranks().end()) ==
            std::vector<int>{0, 1});
      CHECK(std::vector<int>(across->ranks().begin(), across->ranks().end()) ==
            std::vector<int>{1, 3});
    }
  }
  CHECK(gathers > 0);
  CHECK(reductions > 0);
  // Without hpZ, qgZ is one all-to-all over the dp group.
  const proto::Plan flat = testing::MustPlan(g, 4, ZeroPP(1, false, true));
  for (const Ins& ins : flat.ranks(0).instructions())
    if (ins.kind() == Ins::REDUCE_SCATTER) CHECK(ins.collective().hierarchy_size() == 1);
}

// The REDUCE_SCATTER's stages of rank `rank`, each as its group's ranks.
std::vector<std::vector<int>> QgzStages(const proto::Plan& plan, int rank) {
  for (const Ins& ins : plan.ranks(rank).instructions()) {
    if (ins.kind() != Ins::REDUCE_SCATTER) continue;
    std::vector<std::vector<int>> stages;
    for (const std::string& name : ins.collective().hierarchy()) {
      const proto::ProcessGroup* g = Group(plan, name);
      stages.push_back(g ? std::vector<int>(g->ranks().begin(), g->ranks().end())
                         : std::vector<int>{});
    }
    return stages;
  }
  return {};
}

TEST_CASE("qgZ alone: inside the node first where the plan knows the nodes", "[plan]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 256, 8192, 256);
  plan::PlanConfig c = ZeroPP(1, false, true);
  c.node_slots = 2;  // 2 nodes x 2 ranks, as ds-launch plans them from the hostfile
  const proto::Plan plan = testing::MustPlan(g, 4, c);
  CHECK(plan.settings().qgz_local_size() == 2);
  CHECK(QgzStages(plan, 3) == std::vector<std::vector<int>>{{2, 3}, {1, 3}});
  // Across nodes each rank sends only the parts of its own place's rank on the other node, so
  // fewer bytes cross than in the one all-to-all over dp the plan makes without the nodes.
  const proto::Plan flat = testing::MustPlan(g, 4, ZeroPP(1, false, true));
  CHECK(flat.settings().qgz_local_size() == 1);
  CHECK(QgzStages(flat, 3) == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  INFO("between nodes " << BetweenNodes(flat) << " -> " << BetweenNodes(plan) << " bytes");
  CHECK(BetweenNodes(plan) < BetweenNodes(flat));
  CHECK(plan::FormatPlanSummary(plan::SummarizePlan(plan, "job.yaml"))
            .find("inside runs of 2 dp ranks (a node's), then across them") != std::string::npos);
  // One node, or nodes of one tp group each (tensor 2 on nodes of 2): nothing to split.
  c.node_slots = 4;
  CHECK(QgzStages(testing::MustPlan(g, 4, c), 0).size() == 1);
  c.node_slots = 2;
  c.tensor = 2;
  CHECK(QgzStages(testing::MustPlan(g, 8, c), 0).size() == 1);
  // Tensor 2 on nodes of 4 (8 ranks): tp rank 0's dp ranks 0, 2 | 4, 6 by node.
  c.node_slots = 4;
  CHECK(QgzStages(testing::MustPlan(g, 8, c), 6) == std::vector<std::vector<int>>{{4, 6}, {2, 6}});
}

TEST_CASE("ZeRO++: each part cuts the bytes between nodes, all three at least 3x", "[plan]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 256, 8192, 256);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    INFO((dtype == DType::kF32 ? "fp32" : "bf16"));
    const proto::Plan plain = testing::MustPlan(g, 4, ZeroPP(1, false, false, dtype));
    for (const plan::PlanConfig& c :
         {ZeroPP(2, false, false, dtype), ZeroPP(1, true, false, dtype),
          ZeroPP(1, false, true, dtype), ZeroPP(2, true, true, dtype)}) {
      CHECK(BetweenNodes(testing::MustPlan(g, 4, c)) < BetweenNodes(plain));
    }
    const int64_t before = BetweenNodes(plain),
                  after = BetweenNodes(testing::MustPlan(g, 4, ZeroPP(2, true, true, dtype)));
    INFO("between nodes " << before << " -> " << after << " bytes");
    CHECK(before >= 3 * after);
  }
}

TEST_CASE("ZeRO++ with tensor parallelism: the groups are each tp rank's dp ranks", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  plan::PlanConfig c = ZeroPP(2, true, true);
  c.tensor = 2;
  const proto::Plan plan = testing::MustPlan(g, 8, c);
  // Ranks: tp fastest, so tp rank 0's dp ranks are 0, 2, 4, 6; hpz groups of two consecutive
  // dp ranks: {0, 2} and {4, 6} (on nodes of 4 slots: inside a node), across: {0, 4}, {2, 6}.
  for (const Ins& ins : plan.ranks(2).instructions()) {
    if (ins.kind() == Ins::GATHER_SECONDARY) {
      const proto::ProcessGroup* grp = Group(plan, ins.collective().group());
      REQUIRE(grp);
      CHECK(std::vector<int>(grp->ranks().begin(), grp->ranks().end()) == std::vector<int>{0, 2});
    }
    if (ins.kind() == Ins::REDUCE_SCATTER && ins.collective().hierarchy_size() == 2) {
      const proto::ProcessGroup* across = Group(plan, ins.collective().hierarchy(1));
      REQUIRE(across);
      CHECK(std::vector<int>(across->ranks().begin(), across->ranks().end()) ==
            std::vector<int>{2, 6});
    }
  }
  CHECK(testing::Count(plan.ranks(2), Ins::GATHER_SECONDARY) > 0);
}

// A host whose products run at 200 GFLOP/s, its nodes linked at `inter_gbps` GB/s.
HostRates Rates(double inter_gbps) { return testing::TestRates(inter_gbps, 200, 200, false); }

TEST_CASE("ZeRO++ in the cost model: the slow link decides, qgZ's stages by class", "[plan]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 256, 8192, 256);
  const std::vector<int> node = {0, 0, 1, 1}, host = {0, 1, 2, 3};
  auto predict = [&](const plan::PlanConfig& c, double gbps) {
    const proto::Plan p = testing::MustPlan(g, 4, c);
    auto s = PredictStep(p, g, c, node, host, Rates(gbps));
    REQUIRE(s.ok());
    return *s;
  };
  const plan::PlanConfig plain = ZeroPP(1, false, false), all = ZeroPP(2, true, true);
  const StepPrediction slow_plain = predict(plain, 0.125), slow_all = predict(all, 0.125);
  CHECK(slow_all.step_ms < slow_plain.step_ms);  // 1 Gbit/s between nodes
  CHECK(slow_all.inter_bytes * 3 <= slow_plain.inter_bytes);
  // qgZ's first all-to-all stays inside the node: its bytes count as inside.
  const StepPrediction qg = predict(ZeroPP(2, false, true), 0.125);
  const StepPrediction hpz = predict(ZeroPP(2, false, false), 0.125);
  CHECK(qg.intra_bytes > hpz.intra_bytes);
  CHECK(qg.inter_bytes < hpz.inter_bytes);
  // The quantization's own time (transfer_costs.h) rides on the quantized collectives: at a slow
  // kernel it slows ZeRO++'s step and leaves plain ZeRO-3's alone.
  auto at = [&](const plan::PlanConfig& c, double gvps) {
    HostRates r = Rates(0.125);
    r.quantize_gvps = r.dequantize_gvps = gvps;
    const proto::Plan p = testing::MustPlan(g, 4, c);
    auto s = PredictStep(p, g, c, node, host, r);
    REQUIRE(s.ok());
    return s->step_ms;
  };
  CHECK(at(all, 0.01) > at(all, 100) * 1.5);
  CHECK(at(plain, 0.01) == at(plain, 100));
  const proto::Plan quantized = testing::MustPlan(g, 4, all);
  HostRates unit = Rates(0.125);
  unit.quantize_gvps = unit.dequantize_gvps = 1;
  int gathers = 0, reductions = 0;
  for (const proto::Instruction& in : quantized.ranks(0).instructions()) {
    const double q = QuantizationSeconds(quantized, in, unit);
    if (in.quantize().bits() == 0) {
      CHECK(q == 0);
    } else if (in.kind() == proto::Instruction::GATHER_PARAMS) {
      int64_t own = 0;  // the rank's part quantized, the whole (every member's part) back
      for (int u : in.units()) own += quantized.partition().units(u).chunk();
      const double members = plan::CollectiveMembers(quantized, in).size();
      CHECK(q == Approx(own * 1e-9 * (1 + members)));
      ++gathers;
    } else if (in.kind() == proto::Instruction::REDUCE_SCATTER) {
      CHECK(q > 0);
      ++reductions;
    }
  }
  CHECK(gathers > 0);
  CHECK(reductions > 0);
}

TEST_CASE("ZeRO++: settings that cannot work are refused", "[plan]") {
  const Graph g = testing::PresetGraph("gpt2-tiny");
  auto fails = [&](int world, const plan::PlanConfig& c, const std::string& what) {
    auto plan = MakePlan(g, plan::Topology{world, world}, c);
    REQUIRE_FALSE(plan.ok());
    INFO(plan.status().ToString());
    CHECK(plan.status().message().find(what) != std::string::npos);
  };
  fails(4, ZeroPP(3, false, false), "zero_hpz_partition_size 3");
  plan::PlanConfig two = ZeroPP(2, false, false);
  two.stage = 2;
  fails(4, two, "need stage 3");
  fails(4, ZeroPP(1, true, false, DType::kF16), "fp16");
}

}  // namespace
}  // namespace ds::planner
