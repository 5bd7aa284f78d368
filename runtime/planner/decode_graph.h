// DecodeGraph: the graph generation runs, from a model's training graph: the same parameters (in
// the same order, so the model's ParamStore serves it), the forward up to the logits, and
//   attention -> kv_attention over per-layer KV caches (kernels/ops/kv_attention.cc)
//   position_embedding, rope -> reading each token's position
// with the caches and per-run inputs as kState tensors the caller binds (exec::ExecutorOptions
// ::state, names below). The vocabulary projection reads each sequence's last position only
// (last_position), so the graph's "loss" is the next token's logits [batch, 1, vocab] (nothing
// trains).
// The same graph runs prefill (seq = the padded prompt length) and each decode step (seq = 1).
//
//   DS_ASSIGN_OR_RETURN(DecodeGraphInfo d, DecodeGraph(model, /*max_len=*/256));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds::planner {

inline constexpr const char* kPositions = "gen.positions";  // int32 [batch, seq]
inline constexpr const char* kStart = "gen.start";          // int32 [1]: the first new slot
inline constexpr const char* kPad = "gen.pad";              // int32 [batch]: left pads

// One attention layer's cache pair: [batch, n_kv_head, max_len, head_dim] fp32 each.
struct CacheLayer {
  std::string k, v;  // state tensor names
  int64_t n_kv_head = 0, head_dim = 0;
};

struct DecodeGraphInfo {
  Graph graph;
  std::vector<CacheLayer> layers;
  int logits = -1;  // tensor index in graph
  int64_t vocab = 0;
  int64_t max_len = 0;
  // Cache bytes per sequence (every layer, k and v, fp32): what a batch of B sequences of
  // max_len slots costs, B x this.
  int64_t cache_bytes_per_sequence() const;
};

// InvalidArgument naming the model when it has no logits, an attention op it cannot cache, or
// max_len beyond its positions (learned position embeddings).
StatusOr<DecodeGraphInfo> DecodeGraph(const Graph& model, int64_t max_len);

}  // namespace ds::planner
