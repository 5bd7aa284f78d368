// What ds-plan says about generating with the model, from the inference plan of tp rank 0
// (inference_plan.h; every tp rank's has the same sizes): the KV cache a token of one sequence
// adds on a rank (every attention layer's key and value heads the rank holds, fp32; grouped-query
// attention caches its kv heads only), the rank's weights, what a prefill of max_seq_len tokens
// keeps (the inference executor keeps every activation), the stream each tp rank runs (forward
// ranges, all-reduces and the logits' all-gather, with the bytes they move per token), and how
// many sequences of max_seq_len (and of a quarter of it) fit beside the weights in `budget`
// bytes (host memory per rank; 0: not said). Empty when the model cannot generate.
#pragma once

#include <cstdint>
#include <string>

#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"

namespace ds::planner {

std::string FormatGenerationSummary(const Graph& graph, int tp, int64_t budget);

// The hybrid engine's two phases under ZeRO-3 (RLHF's actor): the training step's peak on rank 0
// as planned, and what a rollout adds on every rank (the gathered model, then the KV cache; with
// inference_tp > 1 the rank's tensor-parallel slice instead, cut while at most gather_blocks
// blocks' units are gathered: hybrid_engine.tp_gather_partition_size); empty at other stages
// (the model is whole on every rank already).
std::string FormatHybridEngine(const Graph& graph, const proto::Plan& plan, int inference_tp = 1,
                               int gather_blocks = 8);

}  // namespace ds::planner
