#include "zero/plan/bucket_arena.h"

#include <algorithm>
#include <map>
#include <utility>

#include "proto/plan.pb.h"

namespace ds::zero {
namespace {

constexpr int64_t kAlign = 16;  // elements, as the flat layout aligns parameters

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Live intervals [open, close] over rank `rank`'s instruction indices of every buffer of
// `kind`, in the order the plan made them (empty when the rank has no plan).
std::vector<std::vector<std::pair<int, int>>> LiveIntervals(const proto::Plan& plan, int rank,
                                                            proto::PlanBuffer::Kind kind) {
  std::map<int, int> index_of;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.kind() == kind) {
      const int index = static_cast<int>(index_of.size());
      index_of[b.id()] = index;
    }
  const int n = static_cast<int>(index_of.size());
  std::vector<std::vector<std::pair<int, int>>> live(n);
  const proto::RankPlan* mine = nullptr;
  for (const proto::RankPlan& r : plan.ranks())
    if (r.rank() == rank) mine = &r;
  if (!mine) return {};
  std::vector<int> open(n, -1);
  const int last = mine->instructions_size();
  for (int k = 0; k < last; ++k) {
    const proto::Instruction& in = mine->instructions(k);
    for (int id : in.frees_before())
      if (auto it = index_of.find(id); it != index_of.end() && open[it->second] >= 0) {
        live[it->second].push_back({open[it->second], k});
        open[it->second] = -1;
      }
    for (int id : in.allocs())
      if (auto it = index_of.find(id); it != index_of.end() && open[it->second] < 0)
        open[it->second] = k;
    for (int id : in.frees())
      if (auto it = index_of.find(id); it != index_of.end() && open[it->second] >= 0) {
        live[it->second].push_back({open[it->second], k});
        open[it->second] = -1;
      }
  }
  for (int b = 0; b < n; ++b)
    if (open[b] >= 0) live[b].push_back({open[b], last});
  return live;
}

// First fit, in order of first use, from element `base` on: blocks whose intervals overlap
// never share elements. Sets each block's arena_offset; returns the end of the arena.
int64_t PlaceFirstFit(const std::vector<std::vector<std::pair<int, int>>>& live, int64_t base,
                      std::vector<BucketBlock>* blocks) {
  const int n = static_cast<int>(blocks->size());
  auto overlap = [&](int a, int b) {
    for (const auto& x : live[a])
      for (const auto& y : live[b])
        if (x.first <= y.second && y.first <= x.second) return true;
    return false;
  };
  std::vector<int> order(n);
  for (int b = 0; b < n; ++b) order[b] = b;
  auto first_use = [&](int b) { return live[b].empty() ? INT32_MAX : live[b].front().first; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return first_use(a) < first_use(b); });
  std::vector<int> placed;
  int64_t end_of_arena = base;
  for (int b : order) {
    BucketBlock& block = (*blocks)[b];
    std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of conflicting blocks
    for (int p : placed)
      if (overlap(b, p))
        taken.push_back(
            {(*blocks)[p].arena_offset, (*blocks)[p].arena_offset + AlignUp((*blocks)[p].count)});
    std::sort(taken.begin(), taken.end());
    int64_t at = base;
    for (const auto& [begin, end] : taken) {
      if (begin >= at + AlignUp(block.count)) break;
      at = std::max(at, end);
    }
    block.arena_offset = at;
    end_of_arena = std::max(end_of_arena, at + AlignUp(block.count));
    placed.push_back(b);
  }
  return end_of_arena;
}

}  // namespace

BucketArena AssignBucketArena(const proto::Plan& plan, int rank) {
  BucketArena arena;
  if (plan.settings().zero_stage() < 2) return arena;
  const int n = plan.buckets_size();
  // GRAD_BUCKET buffers are made in bucket order (plan_builder.cc AddBuffers).
  const auto live = LiveIntervals(plan, rank, proto::PlanBuffer::GRAD_BUCKET);
  if (static_cast<int>(live.size()) != n) return arena;
  // Each bucket's flat span: its ranges are adjacent parameters (stage 3: adjacent units).
  std::vector<BucketBlock> blocks(n);
  for (int b = 0; b < n; ++b) {
    const proto::GradBucket& g = plan.buckets(b);
    int64_t lo = INT64_MAX, hi = 0;
    for (const proto::ParamRange& r : g.ranges()) {
      lo = std::min(lo, r.offset());
      hi = std::max(hi, r.offset() + r.count());
    }
    blocks[b] = {b, lo, hi - lo, 0};
  }
  arena.elements = PlaceFirstFit(live, 0, &blocks);
  std::sort(blocks.begin(), blocks.end(),
            [](const BucketBlock& a, const BucketBlock& b) { return a.flat_begin < b.flat_begin; });
  arena.blocks = std::move(blocks);
  return arena;
}

BucketArena AssignGatherArena(const proto::Plan& plan, int rank) {
  BucketArena arena;
  if (plan.settings().zero_stage() != 3) return arena;
  const auto& units = plan.partition().units();
  // Persistent units first, each in its own place for the whole run.
  std::vector<BucketBlock> blocks;
  for (int u = 0; u < units.size(); ++u)
    if (units[u].persistent()) {
      blocks.push_back({u, units[u].offset(), units[u].count(), arena.elements});
      arena.elements += AlignUp(units[u].count());
    }
  // GATHER_BUFFER buffers are made in unit order for the non-persistent units.
  std::vector<BucketBlock> gathered;
  for (int u = 0; u < units.size(); ++u)
    if (!units[u].persistent()) gathered.push_back({u, units[u].offset(), units[u].count(), 0});
  const auto live = LiveIntervals(plan, rank, proto::PlanBuffer::GATHER_BUFFER);
  if (live.size() != gathered.size()) return BucketArena();
  arena.elements = PlaceFirstFit(live, arena.elements, &gathered);
  blocks.insert(blocks.end(), gathered.begin(), gathered.end());
  std::sort(blocks.begin(), blocks.end(),
            [](const BucketBlock& a, const BucketBlock& b) { return a.flat_begin < b.flat_begin; });
  arena.blocks = std::move(blocks);
  return arena;
}

StagingArena AssignStagingArena(const proto::Plan& plan, int rank) {
  StagingArena arena;
  std::vector<BucketBlock> blocks;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.kind() == proto::PlanBuffer::COMM_STAGING) {
      blocks.push_back({b.id(), 0, b.bytes(), 0});
      arena.device = b.device();
    }
  const auto live = LiveIntervals(plan, rank, proto::PlanBuffer::COMM_STAGING);
  if (live.size() != blocks.size()) return arena;
  arena.bytes = PlaceFirstFit(live, 0, &blocks);
  for (const BucketBlock& b : blocks) arena.offset[b.bucket] = b.arena_offset;
  return arena;
}

}  // namespace ds::zero
