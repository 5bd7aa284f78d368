// Bucket arena placement: blocks tile the parameters, buckets live at the same time never
// share bytes, and buckets that do not overlap in time do share them (the arena is smaller
// than the gradients), for stages 2 and 3, with and without overlap_comm and accumulation.
#include "zero/plan/bucket_arena.h"

#include <algorithm>
#include <map>
#include <set>

#include "proto/plan.pb.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::zero {
namespace {

using plan::PlanConfig;
using planner::testing::BaseConfig;
using planner::testing::MustPlan;
using planner::testing::PresetGraph;

// Live intervals per buffer id of `kind`, replayed as the plan's allocs / frees say.
std::map<int, std::vector<std::pair<int, int>>> Live(
    const proto::Plan& plan, int rank,
    proto::PlanBuffer::Kind kind = proto::PlanBuffer::GRAD_BUCKET) {
  std::map<int, int> open;
  std::map<int, std::vector<std::pair<int, int>>> live;
  std::set<int> buckets;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.kind() == kind) buckets.insert(b.id());
  const proto::RankPlan& rp = plan.ranks(rank);
  for (int k = 0; k < rp.instructions_size(); ++k) {
    const proto::Instruction& in = rp.instructions(k);
    for (int id : in.frees_before())
      if (open.count(id)) live[id].push_back({open[id], k}), open.erase(id);
    for (int id : in.allocs())
      if (buckets.count(id)) open[id] = k;
    for (int id : in.frees())
      if (open.count(id)) live[id].push_back({open[id], k}), open.erase(id);
  }
  for (auto& [id, k] : open) live[id].push_back({k, rp.instructions_size()});
  return live;
}

TEST_CASE("Bucket arena: tiles the parameters, separates live buckets, reuses the rest", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  for (int stage : {2, 3})
    for (bool overlap : {false, true})
      for (int gas : {1, 2}) {
        INFO("stage " << stage << " overlap " << overlap << " gas " << gas);
        PlanConfig c = BaseConfig(stage);
        c.reduce_bucket_size = 20000;
        c.overlap_comm = overlap;
        c.gradient_accumulation_steps = gas;
        c.param_persistence_threshold = 0;
        const proto::Plan plan = MustPlan(g, 2, c);
        REQUIRE(plan.buckets_size() > 4);
        const BucketArena arena = AssignBucketArena(plan, 1);
        REQUIRE(static_cast<int>(arena.blocks.size()) == plan.buckets_size());
        // Tiling: ascending, disjoint, covering every parameter.
        for (size_t i = 1; i < arena.blocks.size(); ++i)
          CHECK(arena.blocks[i].flat_begin >=
                arena.blocks[i - 1].flat_begin + arena.blocks[i - 1].count);
        for (const proto::PlanParam& p : plan.model().params()) {
          bool covered = false;
          for (const BucketBlock& b : arena.blocks)
            covered |=
                p.offset() >= b.flat_begin && p.offset() + p.numel() <= b.flat_begin + b.count;
          CHECK(covered);
        }
        // Buckets live at the same time never share arena bytes.
        std::vector<int> buffer_of(plan.buckets_size());
        int next = 0;
        for (const proto::PlanBuffer& b : plan.buffers())
          if (b.kind() == proto::PlanBuffer::GRAD_BUCKET) buffer_of[next++] = b.id();
        auto live = Live(plan, 1);
        int64_t total = 0, largest = 0;
        for (const BucketBlock& a : arena.blocks) {
          total += a.count;
          largest = std::max(largest, a.count);
          CHECK(a.arena_offset + a.count <= arena.elements);
          for (const BucketBlock& b : arena.blocks) {
            if (a.bucket >= b.bucket) continue;
            bool together = false;
            for (auto x : live[buffer_of[a.bucket]])
              for (auto y : live[buffer_of[b.bucket]])
                together |= x.first <= y.second && y.first <= x.second;
            const bool share = a.arena_offset < b.arena_offset + b.count &&
                               b.arena_offset < a.arena_offset + a.count;
            INFO("buckets " << a.bucket << " and " << b.bucket);
            CHECK_FALSE((together && share));
          }
        }
        CHECK(arena.elements >= largest);
        CHECK(arena.elements < total);  // reuse: never more than a few buckets live at once
      }
}

// The gather arena (stage 3 on a device): one block per unit, persistent units alone in their
// place, units gathered at the same time apart, the rest reused (smaller than the model).
TEST_CASE("Gather arena: units gathered together never share, persistent ones never", "[plan]") {
  Graph g = PresetGraph("gpt2-small-test");
  for (bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    PlanConfig c = BaseConfig(3);
    c.overlap_comm = overlap;
    c.param_persistence_threshold = 1000;
    c.prefetch_bucket_size = 30000;
    c.max_reuse_distance = 1000;  // release units between forward and backward
    const proto::Plan plan = MustPlan(g, 2, c);
    const auto& units = plan.partition().units();
    const BucketArena arena = AssignGatherArena(plan, 1);
    REQUIRE(static_cast<int>(arena.blocks.size()) == units.size());
    std::map<int, int> buffer_of;  // unit -> GATHER_BUFFER id (non-persistent units, in order)
    std::vector<int> ids;
    for (const proto::PlanBuffer& b : plan.buffers())
      if (b.kind() == proto::PlanBuffer::GATHER_BUFFER) ids.push_back(b.id());
    size_t next = 0;
    int persistent = 0;
    for (int u = 0; u < units.size(); ++u) {
      if (units[u].persistent())
        ++persistent;
      else
        buffer_of[u] = ids.at(next++);
    }
    REQUIRE(persistent > 0);
    REQUIRE(next == ids.size());
    auto live = Live(plan, 1, proto::PlanBuffer::GATHER_BUFFER);
    int64_t total = 0;
    for (const BucketBlock& a : arena.blocks) {
      total += a.count;
      CHECK(a.count == units[a.bucket].count());
      CHECK(a.flat_begin == units[a.bucket].offset());
      CHECK(a.arena_offset + a.count <= arena.elements);
      for (const BucketBlock& b : arena.blocks) {
        if (a.bucket >= b.bucket) continue;
        const bool share =
            a.arena_offset < b.arena_offset + b.count && b.arena_offset < a.arena_offset + a.count;
        bool together = units[a.bucket].persistent() || units[b.bucket].persistent();
        if (!together)
          for (auto x : live[buffer_of[a.bucket]])
            for (auto y : live[buffer_of[b.bucket]])
              together |= x.first <= y.second && y.first <= x.second;
        INFO("units " << a.bucket << " and " << b.bucket);
        CHECK_FALSE((together && share));
      }
    }
    CHECK(arena.elements < total);  // gathered units reuse the arena
  }
  CHECK(AssignGatherArena(MustPlan(g, 2, BaseConfig(2)), 0).blocks.empty());
}

TEST_CASE("Bucket arena: none for stages 0 and 1", "[plan]") {
  Graph g = PresetGraph("gpt2-tiny");
  for (int stage : {0, 1})
    CHECK(AssignBucketArena(MustPlan(g, 2, BaseConfig(stage)), 0).blocks.empty());
}

}  // namespace
}  // namespace ds::zero
