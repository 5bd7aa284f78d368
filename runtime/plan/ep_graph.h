// Expert parallelism (DeepSpeed-MoE, parallelism.md D): the graph an ep rank runs, from the
// graph of its tp rank (tp_graph.h). The ep ranks of a dp group split each MoE layer's experts:
// ep rank r computes experts [r x E / ep, (r + 1) x E / ep) (expert_linear's expert_begin and
// local_experts), and the tokens travel to them and back:
//
//   moe_router -> [capacity max-reduced over ep, without drops] -> moe_dispatch
//     -> moe_all_to_all (ACT_ALL_TO_ALL on the ep group: block b of the result holds source rank
//        b / (E / ep)'s tokens for local expert b mod (E / ep)) -> the experts
//     -> moe_all_to_all (the outputs back to the tokens' ranks) -> moe_combine
//
// In backward the gradients take the same all-to-alls the other way, at the same cuts. Every
// ep rank's graph has the same structure and shapes; only the experts' attributes differ, and
// nodes keep the whole graph's index as seed_id, so routing and dropout draw the same numbers
// at every ep degree.
//
// Storage: every rank holds every expert's parameters (the flat layout is the whole model's),
// and each computes, and so makes gradients for, its own experts only; the data-parallel
// reductions then sum each expert's gradient over exactly the ranks that compute it (the
// expert-data-parallel group), and ZeRO 1-3 shard expert states over dp like any other.
// Checkpoints hold the whole expert tensors, with global expert ids, at every layout.
#pragma once

#include "runtime/base/status.h"
#include "runtime/plan/tp_graph.h"

namespace ds::plan {

// The experts per MoE layer (the graph's config num_experts; 0 for a dense graph).
int64_t NumExperts(const Graph& graph);

// Rewrites `local` for ep rank `rank` of `ep` (nothing at ep 1): the all-to-all nodes and their
// collectives, the capacity agreement, the experts' ranges; boundaries of the collectives already
// there move with the nodes. InvalidArgument when the graph has no MoE layer or ep does not divide
// num_experts.
Status ApplyExpertParallel(int ep, int rank, TpLocalGraph* local);

}  // namespace ds::plan
