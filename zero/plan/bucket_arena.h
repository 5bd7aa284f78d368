// Where each gradient bucket of a rank's plan lives in one reusable arena (ZeRO stages 2-3).
//
// Backward writes a parameter's gradient into its bucket's block of the arena; the bucket is
// reduce-scattered into the gradient shard and its block zeroed for the next writer. Two
// buckets share bytes only when the plan never has them live at the same time: a bucket is
// live from the instruction that `allocs` its GRAD_BUCKET buffer to the one that `frees` it
// (or `frees_before` it), in every micro-batch. Offsets are first-fit in order of first use,
// as the executor places activation gradients, so the arena is close to the plan's peak of
// live bucket bytes, and the same blocks are reused every step: no page is ever handed back
// and faulted in again (that cost 9% of a DP=2 ZeRO-2 step on a VM).
//
// Pure: a function of the plan and the rank.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace ds::proto {
class Plan;
}

namespace ds::zero {

struct BucketBlock {
  int bucket = 0;
  int64_t flat_begin = 0;  // the bucket's flat element span (its parameters, with padding)
  int64_t count = 0;
  int64_t arena_offset = 0;  // elements from the start of the arena
};

struct BucketArena {
  std::vector<BucketBlock> blocks;  // ascending flat_begin; they tile every bucketed parameter
  int64_t elements = 0;             // arena size
};

// Empty (no blocks) for stages 0 and 1, whose gradients stay one full flat buffer.
BucketArena AssignBucketArena(const proto::Plan& plan, int rank);

// Stage 3 with the parameters on a device (no sparse memory there): where each partition
// unit's gathered parameters live. `bucket` is the unit's index. Persistent units come first,
// each in its own place; the others share elements when the plan never has them gathered at
// the same time (live from their GATHER_BUFFER's alloc, at GATHER_PARAMS, to its free, at
// RELEASE_PARAMS). Empty below stage 3.
BucketArena AssignGatherArena(const proto::Plan& plan, int rank);

// Where each COMM_STAGING buffer (a collective's packed input or output) sits in one arena of
// bytes, allocated once: buffers share bytes only when the plan never has them live together
// (from the collective's issue to its completion). 16-byte aligned offsets.
struct StagingArena {
  std::map<int, int64_t> offset;  // buffer id -> byte offset
  int64_t bytes = 0;
  bool device = false;  // the buffers live in device memory (DEVICE collectives)
};
StagingArena AssignStagingArena(const proto::Plan& plan, int rank);

}  // namespace ds::zero
