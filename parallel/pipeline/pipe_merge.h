// MergeStageStream: one world rank's pipeline stream, from its stage's ZeRO plan (the stream of
// its dp x tp rank in the stage plan, "D": made with whole_backward, so each micro-batch is a
// LOAD, a forward group and a backward group, followed by its reductions) and the schedule's
// compute and point-to-point stream of its pipeline rank ("S", pipe_streams.h):
//
//   D's instructions before the first micro-batch, then S in order, where
//     LOAD of micro-batch i         takes D's LOAD's buffers
//     FORWARD / BACKWARD of i       become D's forward / backward group of i (its node
//                                   ranges, recomputes, tensor-parallel collectives, checkpoint
//                                   stashes and restores), on S's chunk and slot, S's waits on
//                                   the first; with several chunks, each chunk's first forward
//                                   and backward of i run that chunk's part of the group
//                                   (chunk_split.h)
//     after i's last BACKWARD       D's reductions of i (stage 2: every micro-batch); zb-h1's
//                                   BACKWARD_INPUT takes D's backward, the reductions follow
//                                   its BACKWARD_WEIGHT (with tensor parallelism the input
//                                   half runs D's backward ranges and collectives, the weight
//                                   half the whole chunk at once: it needs no collective)
//   then `tied` (TIED_GRAD_ALL_REDUCE) and the last micro-batch's reductions and the step (ZeRO-2:
//   the reductions, `tied`, then the norm and the step), after every send: no rank blocks in a
//   world collective while a neighbour waits for its data.
//
// Activation buffers (per micro-batch in D) are allocated by the step's first LOAD / FORWARD
// and freed by its last BACKWARD (the planner sizes them for every slot). Waits are renumbered.
#pragma once

#include <set>
#include <vector>

#include "parallel/pipeline/rank_chunks.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"

namespace ds::parallel {

struct StageStreams {
  const proto::RankPlan* zero = nullptr;                  // D
  const std::vector<proto::Instruction>* pipe = nullptr;  // S
  std::set<int> activation_buffers;
  const proto::Instruction* tied = nullptr;  // on the first and last stage with tied parameters
  const RankChunks* chunks = nullptr;        // the rank's chunks, where D is planned over several
  // ZeRO-2: `tied` sums the gradient shards, so it follows the last micro-batch's reductions
  // (taking the norm's waits) instead of preceding them.
  bool tied_after_reductions = false;
};

// Internal when D is not cut as described (a stage plan with stage-3 gathers).
StatusOr<std::vector<proto::Instruction>> MergeStageStream(const StageStreams& in,
                                                           int micro_batches);

}  // namespace ds::parallel
