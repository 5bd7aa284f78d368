// Where the activations' gradients live in backward, shared by the executor (which allocates
// them) and the planner (which counts them before any process starts), so the plan's bytes are
// the executor's.
//
// Note [Activation gradient liveness]
// In backward (nodes in reverse), the gradient of activation t is first written by the backward
// of its last consumer and last read by the backward of its producer. Buffers are placed
// first-fit in one arena over those intervals, so the arena is the largest set of gradients live
// at once rather than their sum. An exchange's two buffers share their union (WidenExchanges).
// With a split backward (zero-bubble schedules), the gradients the weight half reads (the outputs
// of nodes with parameters) keep their place to the end.
//
//   GradPlacement p = PlaceActivationGrads(graph, non_diff, false, aligned_bytes);
//   p.offset[t]  // -1: t takes no gradient
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/graph/graph.h"

namespace ds {

// The executor's arenas align every buffer to 64 bytes; the planner counts them so.
constexpr int64_t kArenaAlign = 64;
inline int64_t ArenaBytes(int64_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// First-fit placement of `order`'s items, each live over [start, end] (any index), `bytes` each,
// in one arena: an item reuses the space of those whose end is before its start. Items placed in
// `order`; offset[i] for the items placed, the rest untouched. Returns the arena's bytes.
int64_t PlaceFirstFit(const std::vector<int>& order, const std::vector<int>& start,
                      const std::vector<int>& end, const std::vector<int64_t>& bytes,
                      std::vector<int64_t>* offset);

struct GradPlacement {
  std::vector<int> start;       // per tensor: the backward step (0 = the last node's) that opens
                                // its interval, -1 none
  std::vector<int> order;       // the placed tensors, by start
  std::vector<int64_t> offset;  // per tensor, -1 unplaced
  int64_t bytes = 0;            // the arena
};

// non_diff[i]: node i's OpDef::non_differentiable_inputs; bytes per tensor (the caller's sizes,
// aligned as it allocates).
GradPlacement PlaceActivationGrads(const Graph& graph, const std::vector<uint32_t>& non_diff,
                                   bool split_backward, const std::vector<int64_t>& bytes);

}  // namespace ds
