// TensorParallelShards: what each tensor-parallel rank holds of every parameter, from the
// graph's sharding hints and Megatron's rules (parallelism.md C):
//   column  a linear's output features: rows [r F/t, (r+1) F/t) of [F, in] (and of its bias);
//           the fused QKV of attention by heads: rank r's query heads, and the key / value
//           heads they read (split when tp <= kv heads, replicated when tp exceeds them)
//   row     a linear's input features: columns [r K/t, (r+1) K/t) of [out, K]
//   vocab   embedding / head rows [r V/t, (r+1) V/t)
//   replicated, none: the whole tensor
// Every tp degree starts from the same full weights: a rank's shard is these boxes of the
// full tensor the seed draws (TakeShard); LocalToFull says where a rank's elements lie in the
// whole parameter (what checkpoints store). Sizes the rules cannot split are refused naming the
// model key.
//
//   DS_ASSIGN_OR_RETURN(auto shards, TensorParallelShards(graph, /*tp=*/2, /*rank=*/1));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds::parallel {

// A box [offset, offset + shape) of a parameter's full tensor (same rank).
struct TpBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  // Key / value heads replicated because tp exceeds them: `share` consecutive tp ranks hold
  // this box (their gradients are summed), and `replica` is true on all but the first (which
  // alone counts it in the norm and stores it in checkpoints). share 1: this rank's alone.
  int share = 1;
  bool replica = false;
  int64_t numel() const;
};

struct TpParamShard {
  std::string name;
  std::vector<int64_t> full_shape;
  std::vector<int64_t> local_shape;  // the boxes stacked along the split dimension
  std::vector<TpBox> boxes;          // in the order they are stacked
  bool replicated = false;
};

// Graph parameters in graph order. InvalidArgument naming the model key and the numbers when
// tp does not divide what a rule splits (n_head, n_kv_head, ffn, vocab_size).
StatusOr<std::vector<TpParamShard>> TensorParallelShards(const Graph& graph, int tp, int rank);

// The rank's values of a parameter from the full tensor's (row-major, shard.full_shape):
// shard.boxes stacked along their split dimension, in shard.local_shape.
void TakeShard(const TpParamShard& shard, const float* full, float* local);

// The [begin, end) ranges of the full tensor's flat elements TakeShard reads, sorted and
// merged: what a rank must read of a checkpoint tensor to keep its slice.
std::vector<std::pair<int64_t, int64_t>> ShardRanges(const TpParamShard& shard);

// Where the rank's flat elements [local_begin, local_end) of a parameter lie in the full
// tensor's flat (row-major) order: contiguous pieces, in local order (one per box for splits
// of dimension 0, one per row and box for row-parallel splits). What checkpoints store and
// read: every layout's slices are ranges of the full parameters.
struct FlatPiece {
  int64_t local = 0;  // first local flat element
  int64_t full = 0;   // where it sits in the full tensor
  int64_t count = 0;
  const TpBox* box = nullptr;  // the box it belongs to
};
std::vector<FlatPiece> LocalToFull(const TpParamShard& shard, int64_t local_begin,
                                   int64_t local_end);

}  // namespace ds::parallel
