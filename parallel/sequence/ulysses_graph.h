// DeepSpeed-Ulysses sequence parallelism (parallelism.md C): the graph an sp rank runs. The sp
// ranks of a dp group share each micro-batch; rank r takes positions [r T / sp, (r + 1) T / sp)
// of every sequence (seq_chunk of the token ids and targets, position_embedding / rope at their
// own positions), and everything but attention runs on that chunk. Around each attention:
//
//   qkv [B, T/sp, (H + 2 KV) D] -ulysses_heads-> [sp, B, T/sp, P] (part j: rank j's heads)
//     -seq_all_to_all (ACT_ALL_TO_ALL on the sp group)-> part j: chunk j's tokens of my heads
//     -ulysses_time-> [B, T, (Hr + 2 KVr) D] -attention over my Hr heads (KVr kv heads)->
//   [B, T, Hr D] -ulysses_time (inverse)-> [sp, B, T/sp, Po] -all-to-all->
//     -ulysses_heads (inverse)-> [B, T/sp, H D]
//
// With heads that divide evenly (Hr = H / sp) each rank moves 4 N h / sp per layer (3 for q, k, v
// and 1 for the output; Megatron-SP moves 4 N h). The loss is the whole sequence's: seq_ce_stats
// sums the chunk's token losses and counts them, the plan all-reduces both over sp, and seq_ce_loss
// divides; its backward scales by the whole count, so the sp ranks' gradients are parts of one sum,
// added (not averaged) by the data-parallel reductions over dp x sp, whose mean is over the data
// ranks only (plan_builder). Heads need not divide evenly (kernels/head_split.h): with n_kv_head >=
// sp the kv heads are dealt 2, 2, 1, 1 as DeepSpeed's uneven path does (P, Po: the widest rank's,
// the parts of narrower ranks padded), and with fewer kv heads than ranks (sp a multiple of
// n_kv_head, n_head % sp == 0) ranks share a kv head. Nodes keep the whole graph's index as
// seed_id.
#pragma once

#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status.h"

namespace ds::parallel {

// Rewrites `local` for sp rank `rank` of `sp` (nothing at sp 1). InvalidArgument naming the
// heads when head_split.h's rule cannot deal them; Unimplemented for a mixture-of-experts graph.
Status ApplyUlysses(int sp, int rank, TpLocalGraph* local);

}  // namespace ds::parallel
