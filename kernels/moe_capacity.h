// Expert capacity, shared by the MoE ops' shape inference (kernels/ops/moe.cc) and their CPU
// kernels (kernels/cpu/moe_router.cc): DeepSpeed's rule (parallelism.md D).
//
//   capacity = max(ceil(tokens / num_experts * top_k * capacity_factor), min_capacity)
//
// With drop_tokens 0 nothing is dropped: the capacity is the most tokens any expert receives,
// agreed over the expert-parallel group (a max all-reduce the plan places) before any all-to-all;
// an expert never receives a token twice, so `tokens` rows always suffice.
//
// The dispatch buffers are [num_experts, BufferCapacity, C]; a step uses the first
// num_experts x capacity rows (the capacity the router writes, at most BufferCapacity), expert
// e's tokens at rows [e x capacity, (e + 1) x capacity).
#pragma once

#include <cstdint>

#include "kernels/op.h"

namespace ds::kernels {

struct MoeGating {
  int64_t num_experts = 0;
  int64_t top_k = 1;
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int64_t min_capacity = 4;
  bool drop_tokens = true;
};

// The router's attributes (num_experts, top_k, capacity_factor, eval_capacity_factor,
// min_capacity, drop_tokens), with DeepSpeed's defaults.
MoeGating MoeGatingFrom(const Attrs& attrs);

// The capacity of a step over `tokens` tokens (drop_tokens: the formula above with the training
// or the evaluation factor).
int64_t MoeCapacity(const MoeGating& g, int64_t tokens, bool training);

// Rows per expert the buffers hold: the larger of the two factors' capacities, or `tokens`
// without drops.
int64_t MoeBufferCapacity(const MoeGating& g, int64_t tokens);

}  // namespace ds::kernels
