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
// In backward the gradients take the same all-to-alls the other way, at the same cuts. PR-MoE's
// dense branch runs while the dispatch's all-to-all is in flight (moe_overlap.h). Every
// ep rank's graph has the same structure and shapes; only the experts' attributes differ, and
// nodes keep the whole graph's index as seed_id, so routing and dropout draw the same numbers
// at every ep degree.
//
// Storage: each rank holds only its experts: every stacked expert parameter (ShardKind::kExpert)
// is [E / ep, ...] in the rank's graph, its shard a box of the whole tensor at expert
// rank x E / ep (TpParamShard: initialization takes that slice of the whole draw, checkpoints
// store it as that range of the whole tensor, with global expert ids). ZeRO reduces and shards
// those parameters over the expert-data-parallel group (the dp ranks with the same experts,
// zero::kEdpGroup) and everything else over dp.
#pragma once

#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status.h"

namespace ds::parallel {

// The experts per MoE layer (the graph's config num_experts; 0 for a dense graph).
int64_t NumExperts(const Graph& graph);

// Rewrites `local` for ep rank `rank` of `ep` (nothing at ep 1): the all-to-all nodes and their
// collectives, the capacity agreement, the experts' slices (graph shapes and `shards`); boundaries
// of the collectives already there move with the nodes. InvalidArgument when the graph has no MoE
// layer or ep does not divide num_experts.
// `local` may be a tp rank's graph (tensor parallelism on the dense layers): each tp rank then
// routes its 1 / tp of the tokens (DeepSpeed's drop of duplicate tokens; see FindTokenPaths).
Status ApplyExpertParallel(int ep, int rank, TpLocalGraph* local, int tp = 1, int tp_rank = 0);

// Ep rank `rank`'s (and tp rank `tp_rank`'s) parameters as boxes of the whole graph's (its
// experts' slices; the rest as tensor parallelism splits them), in graph parameter order: what
// its checkpoint slices are.
StatusOr<std::vector<TpParamShard>> ExpertParallelShards(const Graph& whole, int ep, int rank,
                                                         int tp = 1, int tp_rank = 0);

}  // namespace ds::parallel
