// What ds-plan says about generating with the model (runtime/generate): the KV cache a token of
// one sequence adds (every attention layer's key and value heads, fp32; grouped-query attention
// caches its kv heads only), the weights, what a prefill of max_seq_len tokens keeps (the
// inference executor keeps every activation), and how many sequences of max_seq_len (and of a
// quarter of it) fit beside the weights in `budget` bytes (host memory per rank; 0: not said).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/graph/graph.h"

namespace ds::plan {

std::string FormatGenerationSummary(const Graph& graph, int64_t budget);

}  // namespace ds::plan
