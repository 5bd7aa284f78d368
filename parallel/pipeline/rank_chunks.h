// The graph of every model chunk one pipeline rank holds (interleaved schedules: virtual stages
// rank, rank + p, ...), and where each chunk's nodes and tensors sit in it. The rank's
// parameters are laid out and planned over that one graph (ZeRO, the memory timeline); each
// chunk still runs its own graph over the same parameter store, so the pipeline merge
// (pipe_merge.h) cuts the stage plan's node ranges and tensor references back into chunks.
//
//   RankChunks rc = MapRankChunks({&stage1.graph, &stage3.graph});
//   rc.graph;              // nodes of chunk 0, then chunk 1
//   rc.node_offset[1];     // chunk 1's node 0 in rc.graph
//   rc.tensor[1][t];       // chunk 1's tensor t in rc.graph
#pragma once

#include <vector>

#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds::parallel {

struct RankChunks {
  // Nodes one chunk after the other; one tensor per name (the chunks share the token ids,
  // targets and parameters; each chunk's own activations are prefixed "chunk<c>." where names
  // repeat); the loss the last chunk's. One chunk: that chunk's graph as is.
  Graph graph;
  std::vector<int> node_offset;          // per chunk: its first node in `graph`
  std::vector<std::vector<int>> tensor;  // per chunk, per chunk tensor: its index in `graph`
};

RankChunks MapRankChunks(const std::vector<const Graph*>& chunks);

inline Graph RankChunksGraph(const std::vector<const Graph*>& chunks) {
  return MapRankChunks(chunks).graph;
}

// Tensor parallelism with several chunks: the chunks' own tp graphs (StageTpLocal, chunk order)
// as one, in `rc`'s numbering: the parameters' boxes in rc.graph's parameter order, the
// collectives' boundaries and tensors moved to where their chunk sits. InternalError when a
// parameter of rc.graph has no box in any chunk.
StatusOr<TpLocalGraph> RankChunksTpLocal(const std::vector<TpLocalGraph>& chunks,
                                         const RankChunks& rc);

}  // namespace ds::parallel
