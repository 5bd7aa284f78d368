// How Ulysses gives the attention heads to the sp ranks of a group, shared by the layout ops'
// shape inference (kernels/ops/ulysses.cc), their CPU kernels (kernels/cpu/ulysses.cc) and the
// planner (parallel/sequence/ulysses_graph.cc). Each rank takes a contiguous range of query heads
// and the key/value heads those queries read (g = n_head / n_kv_head queries per kv head):
//
//   n_kv_head >= sp        the kv heads are dealt as evenly as they go, the first n_kv_head % sp
//                          ranks one more (6 heads over 4 ranks: 2, 2, 1, 1, DeepSpeed's uneven
//                          path); each rank takes the g queries of each of its kv heads
//   sp % n_kv_head == 0    (fewer kv heads than ranks) n_head % sp must be 0: each rank takes
//   and n_head % sp == 0   n_head / sp queries, all in one kv group, and that one kv head, which
//                          sp / n_kv_head ranks share (the backward sums their gradients)
//
// Anything else is refused by CheckHeadSplit. With uneven ranges the all-to-all's parts are all
// as wide as the widest rank's; the narrower ranks' parts end in zeros.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::kernels {

struct HeadRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// OkStatus when n_head heads with n_kv_head kv heads split over sp ranks by the rule above;
// otherwise an error naming the numbers and the cases that work.
Status CheckHeadSplit(int64_t n_head, int64_t n_kv_head, int64_t sp);

// Rank j's query heads and kv heads (CheckHeadSplit must hold).
HeadRange QueryHeads(int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j);
HeadRange KvHeads(int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j);

// Rank j's range of a segment of `segment` heads: the query heads when segment == n_head, else
// the kv heads (segment == n_kv_head).
HeadRange SegmentHeads(int64_t segment, int64_t n_head, int64_t n_kv_head, int64_t sp, int64_t j);

}  // namespace ds::kernels
