#include "runtime/planner/plan_builder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "runtime/plan/plan_hash.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::planner {
namespace {

using proto::Instruction;
using testing::BaseConfig;
using testing::Count;
using testing::MustPlan;
using testing::PresetGraph;

// Sorted ranges must tile [0, end) exactly.
void CheckTiles(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t end) {
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (const auto& [offset, count] : ranges) {
    CHECK(offset == at);
    at = offset + count;
  }
  CHECK(at == end);
}

std::vector<std::pair<int64_t, int64_t>> Ranges(const Instruction& ins) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const proto::ParamRange& r : ins.ranges()) out.push_back({r.offset(), r.count()});
  return out;
}

int IndexOfLast(const proto::RankPlan& rp, Instruction::Kind kind) {
  int last = -1;
  for (int i = 0; i < rp.instructions_size(); ++i)
    if (rp.instructions(i).kind() == kind) last = i;
  return last;
}

TEST_CASE("Plan: stage 0 all-reduces each bucket once, after the last backward", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  plan::PlanConfig c = BaseConfig(0);
  c.gradient_accumulation_steps = 3;
  c.reduce_bucket_size = 5000;
  proto::Plan plan = MustPlan(g, 2, c);
  const proto::RankPlan& rp = plan.ranks(0);
  CHECK(Count(rp, Instruction::LOAD_MICROBATCH) == 3);
  CHECK(Count(rp, Instruction::FORWARD) == 3);
  CHECK(Count(rp, Instruction::BACKWARD) == 3);
  CHECK(Count(rp, Instruction::ALL_REDUCE) == plan.buckets_size());
  const int last_backward = IndexOfLast(rp, Instruction::BACKWARD);
  std::vector<std::pair<int64_t, int64_t>> reduced;
  for (int i = 0; i < rp.instructions_size(); ++i) {
    const Instruction& ins = rp.instructions(i);
    if (ins.kind() != Instruction::ALL_REDUCE) continue;
    CHECK(i > last_backward);
    CHECK_FALSE(ins.async());
    CHECK(ins.collective().dtype() == proto::DT_BF16);
    for (auto r : Ranges(ins)) reduced.push_back(r);
  }
  CheckTiles(reduced, plan.model().flat_elements());
  // Buckets hold at most reduce_bucket_size elements unless one parameter is larger.
  for (const proto::GradBucket& b : plan.buckets()) {
    int params = 0;
    for (const proto::PlanParam& p : plan.model().params())
      params += p.offset() >= b.ranges(0).offset() &&
                p.offset() < b.ranges(0).offset() + b.ranges(0).count();
    CHECK((b.count() <= c.reduce_bucket_size || params == 1));
  }
  CHECK(plan.buckets(plan.buckets_size() - 1).ranges(0).offset() == 0);  // wte reduced last
}

TEST_CASE("Plan: overlap_comm issues reductions during the last backward", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  for (int stage : {0, 1}) {
    plan::PlanConfig c = BaseConfig(stage);
    c.gradient_accumulation_steps = 2;
    c.reduce_bucket_size = 300000;
    c.overlap_comm = true;
    proto::Plan plan = MustPlan(g, 4, c);
    const proto::RankPlan& rp = plan.ranks(1);
    const int last_backward = IndexOfLast(rp, Instruction::BACKWARD);
    const int norm = IndexOfLast(rp, Instruction::GRAD_NORM_REDUCE);
    std::set<int> async, waited;
    for (int i = 0; i < rp.instructions_size(); ++i) {
      const Instruction& ins = rp.instructions(i);
      for (int w : ins.wait_for()) waited.insert(w);
      if (ins.kind() != Instruction::ALL_REDUCE && ins.kind() != Instruction::REDUCE_SCATTER)
        continue;
      CHECK(ins.async());
      async.insert(i);
    }
    CHECK(static_cast<int>(async.size()) == plan.buckets_size());
    CHECK(*async.begin() < last_backward);  // the first buckets overlap the backward
    CHECK(waited == async);
    for (int w : rp.instructions(norm).wait_for()) CHECK(async.count(w));
  }
}

TEST_CASE("Plan: stage 1 and 2 step on the owned shard and all-gather every shard", "[plan]") {
  Graph g = PresetGraph("llama-tiny");
  for (int stage : {1, 2}) {
    INFO("stage " << stage);
    plan::PlanConfig c = BaseConfig(stage);
    c.gradient_accumulation_steps = 3;
    c.reduce_bucket_size = 3000;
    c.allgather_bucket_size = 6000;
    const int world = 3;
    proto::Plan plan = MustPlan(g, world, c);
    REQUIRE(plan.partition().units_size() == 1);
    const int64_t chunk = plan.partition().units(0).chunk();
    CHECK(chunk % 16 == 0);
    std::vector<std::pair<int64_t, int64_t>> owned;
    for (const proto::RankPlan& rp : plan.ranks()) {
      const Instruction& step = rp.instructions(IndexOfLast(rp, Instruction::OPTIMIZER_STEP));
      for (auto r : Ranges(step)) owned.push_back(r);
      // Stage 2 reduce-scatters every micro-batch (no full gradients); stage 1 once.
      CHECK(Count(rp, Instruction::REDUCE_SCATTER) == plan.buckets_size() * (stage == 2 ? 3 : 1));
    }
    CheckTiles(owned, plan.model().flat_elements());
    std::vector<std::pair<int64_t, int64_t>> gathered;
    for (const Instruction& ins : plan.ranks(0).instructions()) {
      if (ins.kind() != Instruction::ALL_GATHER) continue;
      CHECK(ins.collective().count() <= c.allgather_bucket_size);
      for (auto r : Ranges(ins))
        if (r.second > 0) gathered.push_back(r);  // ranks' slices clipped to the unit
    }
    CheckTiles(gathered, plan.model().flat_elements());
    // Reduce-scatter rank counts are what each rank owns of the bucket.
    for (const Instruction& ins : plan.ranks(0).instructions()) {
      if (ins.kind() != Instruction::REDUCE_SCATTER) continue;
      int64_t sum = 0;
      for (int64_t n : ins.collective().rank_counts()) sum += n;
      CHECK(sum == ins.collective().count());
    }
  }
}

// Replays rank 0's stage-3 stream: every block finds its units gathered and waited for.
void CheckGathers(const proto::Plan& plan, int64_t max_live) {
  std::map<int, int> gathered;  // unit -> gather instruction
  std::set<int> waited;
  int64_t live = 0, peak = 0;
  const proto::RankPlan& rp = plan.ranks(0);
  for (int i = 0; i < rp.instructions_size(); ++i) {
    const Instruction& ins = rp.instructions(i);
    for (int w : ins.wait_for()) waited.insert(w);
    if (ins.kind() == Instruction::GATHER_PARAMS) {
      CHECK(ins.async());
      for (int u : ins.units()) {
        CHECK(gathered.count(u) == 0);
        gathered[u] = i;
        live += plan.partition().units(u).count();
      }
    } else if (ins.kind() == Instruction::RELEASE_PARAMS) {
      for (int u : ins.units()) {
        REQUIRE(gathered.count(u) == 1);
        CHECK(waited.count(gathered[u]) == 1);
        live -= plan.partition().units(u).count();
        gathered.erase(u);
      }
    } else if (ins.kind() == Instruction::FORWARD || ins.kind() == Instruction::BACKWARD) {
      for (const proto::PartitionUnit& u : plan.partition().units()) {
        if (u.persistent()) continue;
        if (std::find(u.blocks().begin(), u.blocks().end(), ins.first_block()) == u.blocks().end())
          continue;
        INFO("instruction " << i << " block " << ins.first_block() << " unit " << u.id());
        REQUIRE(gathered.count(u.id()) == 1);
        CHECK(waited.count(gathered[u.id()]) == 1);
      }
    }
    peak = std::max(peak, live);
  }
  CHECK(gathered.empty());
  CHECK(peak <= max_live);
}

TEST_CASE("Plan: stage 3 gathers each block's parameters before use", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  plan::PlanConfig c = BaseConfig(3);
  c.gradient_accumulation_steps = 2;
  c.reduce_bucket_size = 400000;
  c.param_persistence_threshold = 1000;
  SECTION("defaults: everything prefetched, nothing gathered twice") {
    proto::Plan plan = MustPlan(g, 4, c);
    CheckGathers(plan, c.max_live_parameters);
    int gathers = 0;
    for (const Instruction& ins : plan.ranks(0).instructions())
      if (ins.kind() == Instruction::GATHER_PARAMS) gathers += ins.units_size();
    int partitioned = 0;
    for (const proto::PartitionUnit& u : plan.partition().units()) partitioned += !u.persistent();
    CHECK(gathers == partitioned);
  }
  SECTION("no reuse and no prefetch: gathered again for backward") {
    c.max_reuse_distance = 0;
    c.prefetch_bucket_size = 0;
    proto::Plan plan = MustPlan(g, 4, c);
    CheckGathers(plan, c.max_live_parameters);
    const proto::RankPlan& rp = plan.ranks(0);
    CHECK(Count(rp, Instruction::GATHER_PARAMS) > 2 * 2 * 4);
    CHECK(Count(rp, Instruction::RELEASE_PARAMS) == Count(rp, Instruction::GATHER_PARAMS));
  }
  SECTION("max_live_parameters at the largest block bounds what is gathered") {
    c.max_live_parameters = testing::MustPlan(g, 4, c).model().largest_block_parameters();
    c.max_reuse_distance = 1000000000;
    proto::Plan plan = MustPlan(g, 4, c);
    CheckGathers(plan, c.max_live_parameters);
  }
  proto::Plan plan = MustPlan(g, 4, c);
  const proto::RankPlan& rp = plan.ranks(2);
  CHECK(Count(rp, Instruction::REDUCE_SCATTER) == 2 * plan.buckets_size());
  CHECK(Count(rp, Instruction::ALL_GATHER) >= 1);  // persistent params after the step
  CHECK(IndexOfLast(rp, Instruction::ALL_GATHER) > IndexOfLast(rp, Instruction::OPTIMIZER_STEP));
  std::vector<std::pair<int64_t, int64_t>> owned;
  for (const proto::RankPlan& r : plan.ranks())
    for (auto range : Ranges(r.instructions(IndexOfLast(r, Instruction::OPTIMIZER_STEP))))
      owned.push_back(range);
  CheckTiles(owned, plan.model().flat_elements());
}

// The plan holds every reduction the runner does: the norm always (clipping, the metrics and
// fp16's overflow need it), the overflow flag after it with fp16, and the loss last, waiting
// for every collective still in flight.
TEST_CASE("Plan: norm, overflow and loss reductions are planned around the step", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  for (int stage = 0; stage <= 3; ++stage) {
    plan::PlanConfig c = BaseConfig(stage, DType::kF16);
    proto::Plan plan = MustPlan(g, 2, c);
    const proto::RankPlan& rp = plan.ranks(0);
    const int overflow = IndexOfLast(rp, Instruction::OVERFLOW_REDUCE);
    const int norm = IndexOfLast(rp, Instruction::GRAD_NORM_REDUCE);
    const int step = IndexOfLast(rp, Instruction::OPTIMIZER_STEP);
    CHECK(overflow >= 0);
    CHECK(norm < overflow);
    CHECK(overflow < step);
    CHECK(rp.instructions(norm).collective().count() == 1);
    CHECK(rp.instructions(norm).collective().dtype() == proto::DT_F32);
    CHECK(rp.instructions(norm).collective().placement() == proto::HOST);
    const proto::Instruction& loss = rp.instructions(rp.instructions_size() - 1);
    CHECK(loss.kind() == Instruction::LOSS_REDUCE);
    // The loss, whether the rank has one, the MoE aux losses' sum and count.
    CHECK(loss.collective().count() == 4);
    c = BaseConfig(stage, DType::kBF16);
    c.gradient_clipping = false;
    plan = MustPlan(g, 2, c);
    CHECK(Count(plan.ranks(1), Instruction::OVERFLOW_REDUCE) == 0);
    CHECK(Count(plan.ranks(1), Instruction::GRAD_NORM_REDUCE) == 1);
    CHECK(Count(plan.ranks(1), Instruction::LOSS_REDUCE) == 1);
    plan = MustPlan(g, 1, c);  // one rank: nothing is communicated
    for (const proto::Instruction& in : plan.ranks(0).instructions())
      if (in.has_collective()) CHECK(in.collective().placement() == proto::LOCAL);
  }
}

// Every collective's staging buffers are plan buffers, live from its issue to its completion.
TEST_CASE("Plan: collectives stage through COMM_STAGING buffers with live ranges", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  for (int stage = 1; stage <= 3; ++stage) {
    INFO("stage " << stage);
    proto::Plan plan = MustPlan(g, 2, BaseConfig(stage, DType::kBF16));
    const proto::RankPlan& rp = plan.ranks(1);
    int staged = 0;
    for (int i = 0; i < rp.instructions_size(); ++i) {
      const proto::Instruction& in = rp.instructions(i);
      if (in.kind() != Instruction::REDUCE_SCATTER && in.kind() != Instruction::ALL_GATHER &&
          in.kind() != Instruction::GATHER_PARAMS)
        continue;
      const int out = in.collective().staging_out();
      REQUIRE(out >= 0);
      CHECK(plan.buffers(out).kind() == proto::PlanBuffer::COMM_STAGING);
      CHECK(std::count(in.allocs().begin(), in.allocs().end(), out) == 1);
      int freed = 0;
      for (int j = i; j < rp.instructions_size(); ++j) {
        const auto& f = j == i ? rp.instructions(j).frees() : rp.instructions(j).frees_before();
        freed += static_cast<int>(std::count(f.begin(), f.end(), out));
      }
      CHECK(freed == 1);
      ++staged;
    }
    CHECK(staged > 0);
  }
}

TEST_CASE("Plan: stage 0 norm slices add up to the whole buffer", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  proto::Plan plan = MustPlan(g, 3, BaseConfig(0));
  std::vector<std::pair<int64_t, int64_t>> slices;
  for (const proto::RankPlan& rp : plan.ranks()) {
    for (auto r : Ranges(rp.instructions(IndexOfLast(rp, Instruction::GRAD_NORM_REDUCE))))
      slices.push_back(r);
    CHECK(Ranges(rp.instructions(IndexOfLast(rp, Instruction::OPTIMIZER_STEP))) ==
          std::vector<std::pair<int64_t, int64_t>>{{0, plan.model().flat_elements()}});
  }
  CheckTiles(slices, plan.model().flat_elements());
}

TEST_CASE("Plan: the hash covers every setting", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  plan::PlanConfig c = BaseConfig(2);
  proto::Plan a = MustPlan(g, 2, c);
  CHECK(a.hash() == plan::PlanHash(a));
  CHECK(plan::HashHex(a.hash()).size() == 16);
  CHECK(MustPlan(g, 2, c).hash() == a.hash());
  std::set<uint64_t> hashes{a.hash()};
  c.reduce_bucket_size = 1000;
  hashes.insert(MustPlan(g, 2, c).hash());
  c.stage = 1;
  hashes.insert(MustPlan(g, 2, c).hash());
  c.overlap_comm = true;
  hashes.insert(MustPlan(g, 2, c).hash());
  hashes.insert(MustPlan(g, 4, c).hash());
  CHECK(hashes.size() == 5);
}

}  // namespace
}  // namespace ds::planner
