// Partition units and gradient buckets. See Note [Plan layout] in plan_builder.cc.
#include <algorithm>

#include "zero/plan/builder_context.h"

namespace ds::zero::internal {
namespace {

int64_t ChunkFor(int64_t count, int dp, int64_t align = kFlatAlign) {
  return AlignUp((count + dp - 1) / dp, align);
}

int BackwardPos(const ModelFacts& facts, int block) {
  return static_cast<int>(facts.blocks.size()) - 1 - facts.BlockPosition(block);
}

// Widens the bucket's backward window by a parameter read by `blocks` (ascending).
void Cover(const ModelFacts& facts, const std::vector<int>& blocks, Bucket* b, bool first) {
  int open = BackwardPos(facts, blocks.back());
  int ready = BackwardPos(facts, blocks.front());
  b->open_pos = first ? open : std::min(b->open_pos, open);
  b->ready_pos = first ? ready : std::max(b->ready_pos, ready);
}

// Reduction order is bucket order, so a bucket is never ready before the one issued ahead.
void MakeReadyMonotone(std::vector<Bucket>* buckets) {
  for (size_t i = 1; i < buckets->size(); ++i)
    (*buckets)[i].ready_pos = std::max((*buckets)[i].ready_pos, (*buckets)[i - 1].ready_pos);
}

// What each of the bucket's group ranks owns of it (stages 1-2): the unit holding its range.
std::vector<int64_t> RankCounts(const Bucket& b, const std::vector<Unit>& units, int dp, int ep) {
  const int64_t lo = b.ranges[0].offset(), end = lo + b.ranges[0].count();
  std::vector<int64_t> counts;
  for (const Unit& u : units) {
    if (lo < u.offset || lo >= u.offset + u.count) continue;
    for (int r = 0; r < GroupSize(u.expert, dp, ep); ++r) {
      const int64_t s = std::max(lo, u.offset + r * u.chunk);
      const int64_t e = std::min(end, u.offset + (r + 1) * u.chunk);
      counts.push_back(std::max<int64_t>(0, e - s));
    }
  }
  return counts;
}

std::vector<Bucket> ParamBuckets(const ModelFacts& facts, const std::vector<Unit>& units, int dp,
                                 int ep, int64_t bucket_size) {
  std::vector<Bucket> buckets;
  int hi = -1;  // highest param index of the open bucket
  for (int p = static_cast<int>(facts.params.size()) - 1; p >= 0; --p) {
    const ParamFacts& param = facts.params[p];
    const bool expert = param.expert && ep > 1;
    // A parameter larger than the bucket gets a bucket of its own (as in DeepSpeed); experts'
    // and the others' gradients are reduced over different groups.
    bool fresh = buckets.empty() || buckets.back().numel + param.numel > bucket_size ||
                 buckets.back().expert != expert;
    if (fresh) {
      buckets.emplace_back();
      buckets.back().expert = expert;
      hi = p;
    }
    Bucket& b = buckets.back();
    Cover(facts, param.blocks, &b, fresh);
    b.numel += param.numel;
    proto::ParamRange r;  // params are adjacent in the flat buffer: one range per bucket
    r.set_offset(param.offset);
    r.set_count(facts.params[hi].offset + facts.params[hi].span - param.offset);
    b.ranges.assign(1, r);
    b.count = r.count();
  }
  if (!units.empty())  // stages 1-2: what each rank owns of the bucket
    for (Bucket& b : buckets) b.rank_counts = RankCounts(b, units, dp, ep);
  return buckets;
}

std::vector<Bucket> UnitBuckets(const ModelFacts& facts, const std::vector<Unit>& units, int dp,
                                int ep, int64_t bucket_size) {
  std::vector<Bucket> buckets;
  for (int i = static_cast<int>(units.size()) - 1; i >= 0; --i) {
    const Unit& u = units[i];
    bool fresh = buckets.empty() || buckets.back().numel + u.numel > bucket_size ||
                 buckets.back().expert != u.expert;
    if (fresh) {
      buckets.emplace_back();
      buckets.back().expert = u.expert;
    }
    Bucket& b = buckets.back();
    Cover(facts, u.blocks, &b, fresh);
    b.numel += u.numel;
    b.units.push_back(i);
    proto::ParamRange r;
    r.set_offset(u.offset);
    r.set_count(u.count);
    b.ranges.push_back(r);
    b.count += u.chunk * GroupSize(u.expert, dp, ep);
  }
  for (Bucket& b : buckets) {
    const int n = GroupSize(b.expert, dp, ep);
    b.rank_counts.assign(n, b.count / n);
  }
  return buckets;
}

}  // namespace

std::vector<Unit> MakeUnits(const ModelFacts& facts, int stage, int dp, int ep,
                            int64_t persistence_threshold, int64_t chunk_align) {
  std::vector<Unit> units;
  if (stage == 0) return units;
  std::vector<int> all_blocks;
  for (const BlockFacts& b : facts.blocks) all_blocks.push_back(b.block);
  for (const ParamFacts& p : facts.params) {
    const bool persistent = stage == 3 && p.numel <= persistence_threshold;
    const bool expert = p.expert && ep > 1;
    const std::vector<int>& blocks = stage == 3 ? p.blocks : all_blocks;
    if (units.empty() || units.back().blocks != blocks || units.back().persistent != persistent ||
        units.back().expert != expert) {
      Unit u;
      u.offset = p.offset;
      u.blocks = blocks;
      u.persistent = persistent;
      u.expert = expert;
      units.push_back(u);
    }
    units.back().count += p.span;
    units.back().numel += p.numel;
  }
  int64_t shard = 0;
  for (Unit& u : units) {
    u.chunk = ChunkFor(u.count, GroupSize(u.expert, dp, ep), stage == 3 ? chunk_align : kFlatAlign);
    u.shard_offset = shard;
    shard += u.chunk;
  }
  return units;
}

std::vector<Bucket> MakeBuckets(const ModelFacts& facts, const std::vector<Unit>& units, int stage,
                                int dp, int ep, int64_t bucket_size) {
  std::vector<Bucket> buckets = stage == 3 ? UnitBuckets(facts, units, dp, ep, bucket_size)
                                           : ParamBuckets(facts, units, dp, ep, bucket_size);
  MakeReadyMonotone(&buckets);
  return buckets;
}

int64_t GatheredElements(const Context& ctx, int pos) {
  const int block = ctx.facts.blocks[pos].block;
  int64_t n = 0;
  for (const Unit& u : ctx.units)
    if (!u.persistent && std::binary_search(u.blocks.begin(), u.blocks.end(), block)) n += u.numel;
  return n;
}

}  // namespace ds::zero::internal
