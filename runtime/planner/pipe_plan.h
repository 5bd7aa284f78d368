// MakePipelinePlan: MakePlan's builder for parallel.pipeline > 1. Each pipeline rank runs its
// stage graph (pipe_graph.h, the split of pipe_stages.h), so the planner
//
//   1. plans each stage as a model of its own over its dp x tp ranks (MakePlan, or PlanLocal on
//      the stage's part of tp rank 0's graph, with pp 1 and whole_backward: ZeRO's partition,
//      buckets, reductions, norm, step on the stage's parameters, its tp collectives), giving
//      Plan.stages[s];
//   2. builds the schedule's compute and point-to-point streams (pipe_streams.h) and puts them
//      in place of the stage plan's per-micro-batch LOAD / FORWARD / BACKWARD, keeping the
//      buffers and waits those carried (a micro-batch's reductions right after its backward,
//      the last one's and the step after the whole schedule, so no rank blocks a collective
//      while a neighbour waits for its last send);
//   3. names the world's groups: each stage's "dp.<i>", "tp.<i>", "kv.<i>" numbered on in
//      Megatron's order, a link per direction between neighbouring stages of one (dp, tp)
//      column ("pipe.<a>-<b>", world ranks), "embedding.<i>" for parameters the first and last
//      stage share (tied embeddings, counted in the norm on the first stage only:
//      TIED_GRAD_ALL_REDUCE before the data-parallel reductions over a pair of ranks per
//      (dp, tp) cell; at ZeRO-2, whose ranks hold slices of the gradient, after them over both
//      stages' dp ranks per tp rank), and "world" for the norm, the overflow flag and the loss
//      (the last stage's mean, on every rank).
//
// Activation buffers count once per slot (the micro-batches a stage keeps in flight). Ranks run
// RankView(plan, rank) (plan_view.h).
//
// Interleaved schedules: a rank's chunks share one parameter layout and stage plan, made over
// its chunks in one graph (rank_chunks.h); each chunk's first forward and backward of a
// micro-batch run that chunk's part of the plan's groups (chunk_split.h), its reductions after
// the micro-batch's last backward.
//
// Tensor and sequence parallelism (every schedule; under sequence parallelism each tp rank sends
// its token chunk) and recompute (1f1b, interleaved; partition_activations with tp) run inside
// each stage. Not planned yet, each refused naming the setting: ZeRO-3 and the model states on
// a device.
// Recompute with zb-h1 is refused as wrong: its weight half would need the recomputed
// activations kept until it runs.
#pragma once

#include <vector>

#include "parallel/pipeline/pipe_graph.h"
#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"

namespace ds::planner {

// `config` has its batch triad resolved for topology.dp; topology.pp > 1.
StatusOr<proto::Plan> MakePipelinePlan(const Graph& graph, const plan::Topology& topology,
                                       const plan::PlanConfig& config);

}  // namespace ds::planner
