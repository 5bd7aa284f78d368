// InferencePlan: what one rank runs to generate (prefill, and each decode step: the same stream
// at seq = the prompt length and at seq = 1), planned before anything executes:
//
//   decode   the decode graph (decode_graph.h) of the rank's part of the model: with tensor
//            parallelism tp rank r's query heads, the kv heads they read and its vocabulary
//            rows (Megatron's split, as training's; tp_graph.h), so its KV caches hold only
//            its kv heads
//   stream   FORWARD node ranges with an ACT_ALL_REDUCE on the "tp" group between them (after
//            each row-parallel linear and the vocab-parallel embedding) and, with a
//            vocab-parallel head, a last ACT_ALL_GATHER of the logits: every tp rank then
//            holds the whole next-token logits and samples the same token
//   caches   the KV caches as plan buffers: per attention layer k and v, the rank's kv heads
//
// Collectives name tensors of `decode.graph`; their counts are per token and sequence (the
// runner multiplies by batch x seq). At tp 1 the stream is one FORWARD.
//
//   DS_ASSIGN_OR_RETURN(InferencePlan p, MakeInferencePlan(model, /*max_len=*/256, 2, rank));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/tensor/tp_shards.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/planner/decode_graph.h"

namespace ds::planner {

struct InferencePlan {
  int tp = 1, tp_rank = 0;
  DecodeGraphInfo decode;  // the rank's graph and caches; vocab is the whole one
  std::vector<parallel::TpParamShard> shards;  // per parameter of decode.graph: the rank's box
  std::vector<proto::Instruction> stream;
  int64_t vocab_local = 0;  // the logits' width on this rank before the gather
  // Per token and sequence: elements all-reduced over tp (activations) and gathered (logits).
  int64_t reduced_per_token = 0, gathered_per_token = 0;
};

// InvalidArgument naming the model (decode_graph.h's errors) or the tensor-parallel rule that
// does not hold (n_head or n_kv_head against tp, tp_graph.h).
StatusOr<InferencePlan> MakeInferencePlan(const Graph& model, int64_t max_len, int tp = 1,
                                          int tp_rank = 0);

}  // namespace ds::planner
