#include "zero/shard_layout.h"

#include <algorithm>

#include "proto/plan.pb.h"
#include "zero/plan/bucket_arena.h"

namespace ds::zero {

std::pair<int64_t, int64_t> OwnedOfUnit(const proto::PartitionUnit& u, int rank) {
  const int64_t begin = u.offset() + rank * u.chunk();
  const int64_t end = std::min(u.offset() + u.count(), begin + u.chunk());
  return {begin, std::max(begin, end)};
}

int DpRankOf(const proto::Plan& plan, int rank) {
  const int tp = std::max(1, plan.topology().tp()), dp = std::max(1, plan.topology().dp());
  return rank / tp % dp;
}

int UnitRanks(const proto::Plan& plan, const proto::PartitionUnit& u) {
  const int dp = std::max(1, plan.topology().dp()), ep = std::max(1, plan.topology().ep());
  return u.expert() ? dp / ep : dp;
}

int UnitRankOf(const proto::Plan& plan, const proto::PartitionUnit& u, int rank) {
  const int d = DpRankOf(plan, rank), ep = std::max(1, plan.topology().ep());
  return u.expert() ? d / ep : d;
}

ShardLayout LayoutFor(const proto::Plan& plan, int rank, int64_t total) {
  ShardLayout layout;
  const int stage = plan.settings().zero_stage();
  layout.swap_states = plan.swap().sub_groups_size() > 0;
  layout.swap_master = layout.swap_states && plan.swap().master();
  layout.swap_params = layout.swap_states && plan.swap().params();
  if (stage == 0 || plan.partition().units_size() == 0) {
    layout.segments.push_back({0, total, 0});
    layout.shard_elements = total;
    return layout;
  }
  for (const proto::PartitionUnit& u : plan.partition().units()) {
    auto [begin, end] = OwnedOfUnit(u, UnitRankOf(plan, u, rank));
    end = std::min(end, total);
    if (end > begin) layout.segments.push_back({begin, end - begin, u.shard_offset()});
  }
  layout.shard_elements = plan.partition().shard_elements();
  layout.partition_grads = stage >= 2;
  layout.partition_params = stage == 3;
  const zero::BucketArena arena = zero::AssignBucketArena(plan, rank);
  for (const zero::BucketBlock& b : arena.blocks)
    layout.grad_blocks.push_back({b.flat_begin, b.count, b.arena_offset});
  layout.grad_arena_elements = arena.elements;
  return layout;
}

}  // namespace ds::zero
