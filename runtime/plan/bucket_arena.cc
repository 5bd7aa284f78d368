#include "runtime/plan/bucket_arena.h"

#include <algorithm>
#include <map>
#include <utility>

#include "proto/plan.pb.h"

namespace ds::plan {
namespace {

constexpr int64_t kAlign = 16;  // elements, as the flat layout aligns parameters

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BucketArena AssignBucketArena(const proto::Plan& plan, int rank) {
  BucketArena arena;
  if (plan.settings().zero_stage() < 2) return arena;
  // GRAD_BUCKET buffers are made in bucket order (plan_builder.cc AddBuffers).
  std::map<int, int> bucket_of_buffer;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.kind() == proto::PlanBuffer::GRAD_BUCKET) {
      const int index = static_cast<int>(bucket_of_buffer.size());
      bucket_of_buffer[b.id()] = index;
    }
  const int n = plan.buckets_size();
  if (static_cast<int>(bucket_of_buffer.size()) != n) return arena;
  const proto::RankPlan* mine = nullptr;
  for (const proto::RankPlan& r : plan.ranks())
    if (r.rank() == rank) mine = &r;
  if (!mine) return arena;

  // Live intervals [open, close] of every bucket, over the rank's instruction indices.
  std::vector<std::vector<std::pair<int, int>>> live(n);
  std::vector<int> open(n, -1);
  const int last = mine->instructions_size();
  for (int k = 0; k < last; ++k) {
    const proto::Instruction& in = mine->instructions(k);
    for (int id : in.frees_before())
      if (auto it = bucket_of_buffer.find(id); it != bucket_of_buffer.end() && open[it->second] >= 0) {
        live[it->second].push_back({open[it->second], k});
        open[it->second] = -1;
      }
    for (int id : in.allocs())
      if (auto it = bucket_of_buffer.find(id); it != bucket_of_buffer.end() && open[it->second] < 0)
        open[it->second] = k;
    for (int id : in.frees())
      if (auto it = bucket_of_buffer.find(id); it != bucket_of_buffer.end() && open[it->second] >= 0) {
        live[it->second].push_back({open[it->second], k});
        open[it->second] = -1;
      }
  }
  for (int b = 0; b < n; ++b)
    if (open[b] >= 0) live[b].push_back({open[b], last});
  auto overlap = [&](int a, int b) {
    for (const auto& x : live[a])
      for (const auto& y : live[b])
        if (x.first <= y.second && y.first <= x.second) return true;
    return false;
  };

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
  // First fit, in order of first use.
  std::vector<int> order(n);
  for (int b = 0; b < n; ++b) order[b] = b;
  auto first_use = [&](int b) { return live[b].empty() ? last : live[b].front().first; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first_use(a) < first_use(b); });
  std::vector<int> placed;
  for (int b : order) {
    std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of conflicting buckets
    for (int p : placed)
      if (overlap(b, p)) taken.push_back({blocks[p].arena_offset, blocks[p].arena_offset + AlignUp(blocks[p].count)});
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;
    for (const auto& [begin, end] : taken) {
      if (begin >= at + AlignUp(blocks[b].count)) break;
      at = std::max(at, end);
    }
    blocks[b].arena_offset = at;
    arena.elements = std::max(arena.elements, at + AlignUp(blocks[b].count));
    placed.push_back(b);
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const BucketBlock& a, const BucketBlock& b) { return a.flat_begin < b.flat_begin; });
  arena.blocks = std::move(blocks);
  return arena;
}

}  // namespace ds::plan
