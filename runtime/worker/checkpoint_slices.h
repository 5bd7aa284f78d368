// The slices of the whole parameters each rank's shard file holds (Note [Sharded checkpoints]
// in trainer_checkpoint.cc): a rank's ZeRO segments cut per parameter and state, a tensor-parallel
// rank's as boxes of the whole parameters, and every rank's of a pipeline from its stage's layout.
// Each element of every parameter is stored by exactly one rank, so any layout reads the
// checkpoint back as ranges of whole parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/tensor/tp_shards.h"
#include "proto/plan.pb.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/graph/graph.h"
#include "zero/param_store.h"

namespace ds::worker {

struct OwnedSlice {
  ckpt::SliceDesc desc;
  int64_t flat = 0;        // flat index (this rank's layout) of the slice's first element
  int64_t param_flat = 0;  // the parameter's flat offset: the manifest's order
};

// The slices `segments` store: per state, per segment, per parameter it cuts, in that order.
std::vector<OwnedSlice> SlicesOf(const std::vector<zero::ShardSegment>& segments,
                                 const std::vector<zero::ParamSlot>& slots,
                                 const std::vector<std::string>& states);

// Tensor parallelism: a tp rank's slices of its local parameters as slices of the full ones
// (parallel::LocalToFull); replicated parameters only from tp rank 0 (shared kv heads from their
// first holder). `shards` and `slots` name the parameters in the same order. Rows of equal width
// at a fixed stride (a row-parallel weight's columns of every row) become one strided slice.
std::vector<OwnedSlice> ToFullSlices(const std::vector<OwnedSlice>& local,
                                     const std::vector<parallel::TpParamShard>& shards,
                                     const std::vector<zero::ParamSlot>& slots, int tp_rank);

// Every rank's slices of a pipeline plan, each from its stage's layout; `whole` gives the
// parameters' shapes (with tensor parallelism, a tp rank's graph) and the manifest's order.
// Parameters the first stage shares with a later one (tied embeddings) from the first only.
std::vector<std::vector<OwnedSlice>> PipelineSlices(const proto::Plan& plan, const Graph& whole,
                                                    const std::vector<std::string>& states);

}  // namespace ds::worker
