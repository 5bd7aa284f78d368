// PR-MoE's dense branch overlapped with the experts' all-to-all (Megatron's shared-expert
// overlap; DeepSpeed-MoE's use_residual). Within an MoE layer the only compute that does not
// wait for the tokens' exchange is the residual dense MLP and its mixing coefficient, which read
// the layer's input alone. The pass moves them between the dispatch and the exchange
// (moe_all_to_all) and gives the exchange's two cuts an overlap window over them
// (TpCollective::wait):
//
//   forward   dispatch -> post the all-to-all -> dense MLP, coefficient -> wait -> the experts
//   backward  the experts' backward -> post the gradients' all-to-all -> the dense MLP's and the
//             coefficient's backward -> wait -> the dispatch's backward
//
// The step stays the same computation (every node keeps its seed_id, only the order changes) and
// the exchange's buffers stay live over the window (OpDef::exchange). Layers whose branch does
// not fit the pattern keep their order and a synchronous all-to-all.
#pragma once

#include "parallel/tensor/tp_graph.h"

namespace ds::parallel {

// Reorders `local` (an ep rank's graph, ep_graph.h) and opens the windows; the collectives'
// boundaries move with their nodes. Returns the number of layers overlapped.
int OverlapSharedExperts(TpLocalGraph* local);

// Every collective of `local` synchronous at its post (parallel.moe_shared_expert_overlap false):
// the same computation in the same node order, without the windows.
void CloseOverlapWindows(TpLocalGraph* local);

}  // namespace ds::parallel
