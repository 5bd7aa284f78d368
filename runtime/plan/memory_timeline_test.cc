#include "runtime/plan/memory_timeline.h"

#include <catch2/catch.hpp>

#include "runtime/planner/plan_test_util.h"

namespace ds::plan {
namespace {

using planner::testing::BaseConfig;
using planner::testing::MustPlan;
using planner::testing::PresetGraph;
using proto::PlanBuffer;

int64_t KindAt(const proto::MemorySummary& m, PlanBuffer::Kind kind) {
  for (const proto::KindBytes& k : m.peak_by_kind())
    if (k.kind() == kind) return k.bytes();
  return 0;
}

TEST_CASE("Memory: model states follow the ZeRO paper's arithmetic at dp 4", "[plan]") {
  // Mixed-precision Adam: 2 (16-bit params) + 2 (16-bit grads) + 12 (fp32 master, m, v) bytes per
  // parameter; stage 1 divides the 12 by dp, stage 2 the 2 + 12, stage 3 all 16.
  Graph g = PresetGraph("gpt2-small-test");
  const double psi = static_cast<double>(g.NumParameters());
  const double n = 4;
  const double expected[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n,
                              16 * psi / n};
  for (int stage = 0; stage <= 3; ++stage) {
    PlanConfig c = BaseConfig(stage);
    c.param_persistence_threshold = 0;  // the paper partitions every parameter
    proto::Plan plan = MustPlan(g, 4, c);
    for (const proto::RankPlan& rp : plan.ranks()) {
      const double got = static_cast<double>(rp.memory().model_state_bytes());
      INFO("stage " << stage << " rank " << rp.rank() << ": " << got << " vs " << expected[stage]);
      CHECK(got == Approx(expected[stage]).epsilon(0.01));
      CHECK(got >= expected[stage]);  // padding only adds
    }
  }
}

TEST_CASE("Memory: fp32 training keeps no separate master copy", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  const double psi = static_cast<double>(g.NumParameters());
  proto::Plan plan = MustPlan(g, 4, BaseConfig(1, DType::kF32));
  const proto::MemorySummary& m = plan.ranks(0).memory();
  CHECK(KindAt(m, PlanBuffer::MASTER_WEIGHTS) == 0);
  // 4 (params) + 4 (grads) + 8 / dp (Adam m and v)
  CHECK(m.model_state_bytes() == Approx(8 * psi + 8 * psi / 4).epsilon(0.01));
}

TEST_CASE("Memory: stage 3 persistent parameters stay whole", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  PlanConfig c = BaseConfig(3);
  c.param_persistence_threshold = 0;
  const int64_t partitioned = MustPlan(g, 4, c).ranks(0).memory().model_state_bytes();
  c.param_persistence_threshold = 100000;
  proto::Plan plan = MustPlan(g, 4, c);
  int64_t persistent = 0;
  for (const proto::PartitionUnit& u : plan.partition().units())
    if (u.persistent()) persistent += u.chunk() * 4 * 2;  // full bf16 copy
  CHECK(persistent > 0);
  CHECK(plan.ranks(0).memory().model_state_bytes() == partitioned + persistent);
}

TEST_CASE("Memory: activations peak at one micro-batch, buffers come and go", "[plan]") {
  Graph g = PresetGraph("llama-tiny");
  for (int stage = 0; stage <= 3; ++stage) {
    PlanConfig c = BaseConfig(stage);
    c.gradient_accumulation_steps = 3;
    c.reduce_bucket_size = 2000;
    c.param_persistence_threshold = 1000;  // llama-tiny's params are all under the default
    proto::Plan plan = MustPlan(g, 2, c);
    int64_t one_micro_batch = 0;
    for (const PlanBuffer& b : plan.buffers())
      if (b.kind() == PlanBuffer::ACTIVATIONS) one_micro_batch += b.bytes();
    const proto::MemorySummary& m = plan.ranks(1).memory();
    CHECK(KindAt(m, PlanBuffer::ACTIVATIONS) == one_micro_batch);
    CHECK(m.peak_bytes() >= m.model_state_bytes() + one_micro_batch);
    CHECK(m.peak_instruction() >= 0);
    if (stage >= 2) CHECK(KindAt(m, PlanBuffer::GRAD_BUCKET) > 0);
    if (stage == 3) CHECK(KindAt(m, PlanBuffer::GATHER_BUFFER) > 0);
    int64_t at_peak = 0;
    for (const proto::KindBytes& k : m.at_peak()) at_peak += k.bytes();
    CHECK(at_peak == m.peak_bytes());
  }
}

proto::Plan TinyPlan() {
  proto::Plan plan;
  for (int i = 0; i < 2; ++i) {
    PlanBuffer* b = plan.add_buffers();
    b->set_id(i);
    b->set_name("b" + std::to_string(i));
    b->set_kind(PlanBuffer::ACTIVATIONS);
    b->set_bytes(100 * (i + 1));
  }
  plan.mutable_buffers(0)->set_whole_step(true);
  proto::RankPlan* rp = plan.add_ranks();
  rp->add_instructions()->add_allocs(1);
  rp->add_instructions()->add_frees(1);
  return plan;
}

TEST_CASE("Memory: the walk rejects inconsistent live ranges", "[plan]") {
  proto::Plan plan = TinyPlan();
  auto ok = WalkMemory(plan, 0);
  REQUIRE(ok.ok());
  CHECK(ok->peak_bytes() == 300);
  CHECK(ok->peak_instruction() == 0);
  SECTION("double alloc") {
    plan.mutable_ranks(0)->mutable_instructions(1)->add_allocs(1);
    CHECK_THAT(WalkMemory(plan, 0).status().message(), Catch::Contains("allocates live buffer b1"));
  }
  SECTION("free of a whole-step buffer") {
    plan.mutable_ranks(0)->mutable_instructions(1)->add_frees(0);
    CHECK_THAT(WalkMemory(plan, 0).status().message(), Catch::Contains("not live"));
  }
  SECTION("left live") {
    plan.mutable_ranks(0)->mutable_instructions(1)->clear_frees();
    CHECK_THAT(WalkMemory(plan, 0).status().message(), Catch::Contains("ends with b1 live"));
  }
  SECTION("unknown buffer and rank") {
    plan.mutable_ranks(0)->mutable_instructions(0)->add_allocs(7);
    CHECK_THAT(WalkMemory(plan, 0).status().message(), Catch::Contains("unknown buffer 7"));
    CHECK_FALSE(WalkMemory(plan, 3).ok());
  }
}

}  // namespace
}  // namespace ds::plan
