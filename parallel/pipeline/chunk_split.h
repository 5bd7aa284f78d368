// SplitByChunk: a stage plan's forward or backward group of one micro-batch (pipe_merge.h's D),
// planned over the rank's chunks as one graph (rank_chunks.h), cut back into what each chunk's
// executor runs:
//
//   FORWARD / RECOMPUTE / BACKWARD   cut at the chunks' node boundaries; each piece's node range
//                                    in its chunk's numbering (forward pieces in ascending chunk
//                                    order, backward ones descending: the order they run in)
//   ACT_ALL_REDUCE / _GATHER / _REDUCE_SCATTER, CHECKPOINT_STASH / _RESTORE
//                                    to the chunk that owns their activation, its tensors
//                                    renumbered to that chunk's
//   anything else                    to the chunk of the piece before it
//
// A cut instruction's waits, allocations and frees_before go with its first piece, its frees
// with its last; computes_loss with the piece that ends where it ends. With one chunk the group
// comes back as it is.
#pragma once

#include <vector>

#include "parallel/pipeline/rank_chunks.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"

namespace ds::parallel {

struct ChunkPiece {
  proto::Instruction ins;
  int from = 0;  // its instruction's index in D
};

// Per chunk, its pieces in D's order. `group` indexes `list`. InternalError when an activation
// belongs to no chunk or a node range leaves the rank's graph.
StatusOr<std::vector<std::vector<ChunkPiece>>> SplitByChunk(
    const RankChunks& chunks, const google::protobuf::RepeatedPtrField<proto::Instruction>& list,
    const std::vector<int>& group);

}  // namespace ds::parallel
