#include "runtime/plan/collective_check.h"

#include <catch2/catch.hpp>

#include "runtime/plan/memory_timeline.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::plan {
namespace {

using planner::testing::BaseConfig;
using planner::testing::MustPlan;
using planner::testing::PresetGraph;
using proto::Instruction;

// Instruction indices of rank `r`'s collectives.
std::vector<int> Collectives(const proto::Plan& plan, int r) {
  std::vector<int> out;
  for (int i = 0; i < plan.ranks(r).instructions_size(); ++i)
    if (IsCollective(plan.ranks(r).instructions(i).kind())) out.push_back(i);
  return out;
}

TEST_CASE(
    "CheckCollectiveOrder: every planned combination is deadlock-free "
    "and stable",
    "[plan]") {
  const int64_t bucket_sizes[] = {4096, 200000, 500000000};  // small, medium, huge
  int plans = 0;
  for (const char* model : {"gpt2-tiny", "llama-tiny", "gpt2-small-test"}) {
    Graph g = PresetGraph(model);
    for (int world : {1, 2, 3, 4, 8})
      for (int stage = 0; stage <= 3; ++stage)
        for (int64_t bucket : bucket_sizes)
          for (int gas : {1, 3})
            for (DType dtype : {DType::kF32, DType::kBF16})
              for (bool overlap : {false, true}) {
                PlanConfig c = BaseConfig(stage, dtype);
                c.gradient_accumulation_steps = gas;
                c.reduce_bucket_size = bucket;
                c.allgather_bucket_size = bucket;
                c.prefetch_bucket_size = bucket;
                c.max_reuse_distance = bucket;
                c.overlap_comm = overlap;
                INFO(model << " world " << world << " stage " << stage << " bucket " << bucket
                           << " gas " << gas << " " << DTypeName(dtype) << " overlap "
                           << c.overlap_comm);
                proto::Plan a = MustPlan(g, world, c);
                Status s = CheckCollectiveOrder(a);
                INFO(s.ToString());
                REQUIRE(s.ok());
                proto::Plan b = MustPlan(g, world, c);
                REQUIRE(a.hash() == b.hash());
                REQUIRE(PlanHash(b) == a.hash());
                REQUIRE(a.ranks_size() == world);
                ++plans;
              }
  }
  CHECK(plans == 3 * 5 * 4 * 3 * 2 * 2 * 2);
}

proto::Plan SamplePlan(int stage) {
  PlanConfig c = BaseConfig(stage);
  c.reduce_bucket_size = 3000;
  return MustPlan(PresetGraph("gpt2-tiny"), 3, c);
}

TEST_CASE("CheckCollectiveOrder: finds each kind of mismatch", "[plan]") {
  proto::Plan plan = SamplePlan(2);
  REQUIRE(CheckCollectiveOrder(plan).ok());
  std::vector<int> c1 = Collectives(plan, 1);
  REQUIRE(c1.size() >= 3);
  auto* ins = plan.mutable_ranks(1)->mutable_instructions();
  SECTION("order") {
    ins->SwapElements(c1[0], c1[1]);
    Status s = CheckCollectiveOrder(plan);
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(s.message(), Catch::Contains("group \"dp\": collective 0 differs: rank 0"));
    CHECK_THAT(s.message(), Catch::Contains("rank 1 instruction"));
  }
  SECTION("size") {
    ins->Mutable(c1[1])->mutable_collective()->set_count(7);
    CHECK_THAT(CheckCollectiveOrder(plan).message(), Catch::Contains("of 7 DT_BF16 elements"));
  }
  SECTION("per-rank counts") {
    ins->Mutable(c1[0])->mutable_collective()->set_rank_counts(0, 1);
    CHECK_FALSE(CheckCollectiveOrder(plan).ok());
  }
  SECTION("dtype") {
    ins->Mutable(c1[2])->mutable_collective()->set_dtype(proto::DT_F32);
    CHECK_THAT(CheckCollectiveOrder(plan).message(), Catch::Contains("DT_F32"));
  }
  SECTION("a missing collective") {
    ins->Mutable(c1.back())->set_kind(Instruction::OPTIMIZER_STEP);
    CHECK_THAT(CheckCollectiveOrder(plan).message(),
               Catch::Contains("rank 0 issues " + std::to_string(c1.size()) +
                               " collectives, rank 1 issues " + std::to_string(c1.size() - 1)));
  }
  SECTION("a group without the rank") {
    plan.mutable_groups(0)->clear_ranks();
    plan.mutable_groups(0)->add_ranks(0);
    CHECK_THAT(CheckCollectiveOrder(plan).message(), Catch::Contains("does not contain it"));
  }
  SECTION("waiting for a sync or later instruction") {
    ins->Mutable(0)->add_wait_for(1);
    CHECK_THAT(CheckCollectiveOrder(plan).message(),
               Catch::Contains("not an earlier async instruction"));
  }
}

TEST_CASE("CheckCollectiveOrder: every send has its recv", "[plan]") {
  proto::Plan plan = SamplePlan(0);
  auto add = [&](int rank, Instruction::Kind kind, int peer, int64_t count) {
    Instruction* ins = plan.mutable_ranks(rank)->add_instructions();
    ins->set_kind(kind);
    ins->mutable_collective()->set_peer(peer);
    ins->mutable_collective()->set_count(count);
    ins->mutable_collective()->set_dtype(proto::DT_BF16);
  };
  add(0, Instruction::SEND, 1, 64);
  add(1, Instruction::RECV, 0, 64);
  CHECK(CheckCollectiveOrder(plan).ok());
  SECTION("unmatched") {
    add(1, Instruction::SEND, 2, 64);
    CHECK_THAT(CheckCollectiveOrder(plan).message(),
               Catch::Contains("rank 1 -> rank 2: 1 SEND but 0 RECV"));
  }
  SECTION("different size") {
    add(2, Instruction::SEND, 0, 64);
    add(0, Instruction::RECV, 2, 32);
    CHECK_THAT(CheckCollectiveOrder(plan).message(),
               Catch::Contains("rank 2 -> rank 0: message 0 sends 64 elements, receives 32"));
  }
}

TEST_CASE("Plan: every rank's memory walk holds after the check", "[plan]") {
  for (int stage = 0; stage <= 3; ++stage) {
    proto::Plan plan = SamplePlan(stage);
    for (int r = 0; r < plan.ranks_size(); ++r) {
      auto m = WalkMemory(plan, r);
      REQUIRE(m.ok());
      CHECK(m->SerializeAsString() == plan.ranks(r).memory().SerializeAsString());
    }
  }
}

}  // namespace
}  // namespace ds::plan
