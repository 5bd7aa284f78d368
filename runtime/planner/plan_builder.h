// MakePlan: the step planner. From a graph, a topology and a PlanConfig it produces, for every
// rank, the ordered instructions of one optimizer step (load micro-batch, gather / release
// parameters, forward / backward of block ranges, bucketed gradient reductions, norm and overflow
// reductions, optimizer step on the owned shard, all-gather of updated parameters), the buffers
// each instruction touches, each rank's memory timeline summary and the plan hash.
//
//   DS_ASSIGN_OR_RETURN(proto::Plan plan, MakePlan(graph, {4, 4}, config));
//   DS_RETURN_IF_ERROR(CheckCollectiveOrder(plan));     // collective_check.h
//   if (PlanHash(plan) != received.hash()) ...           // plan_hash.h
//
// Pure: no I/O, no globals besides the op registry (read-only), deterministic. Thread-safe.
#pragma once

#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"

namespace ds::parallel {
struct TpLocalGraph;  // parallel/tensor/tp_graph.h
}  // namespace ds::parallel

namespace ds::planner {

inline constexpr int kPlanVersion = 6;  // 6: LOSS_REDUCE adds loss parts and aux counts

// Frozen weights (LoRA's base model) are laid out whole on every rank: InvalidArgument for a
// layout that would cut the graph (tensor, pipeline, expert or sequence parallelism).
Status CheckFrozenLayout(const Graph& graph, const plan::Topology& topology);

// InvalidArgument, naming the setting and the numbers, for a configuration that cannot work: a
// world size that does not divide the batch (train = micro x gas x dp), dp != world, a stage
// outside 0..3, a bucket size <= 0, negative stage-3 knobs, a stage-3 max_live_parameters below
// what one block reads, a non-float dtype, or a graph whose shapes do not infer for (micro batch,
// seq_len). Needs the op registry populated (link //kernels/ops:op_defs).
StatusOr<proto::Plan> MakePlan(const Graph& graph, const plan::Topology& topology,
                               const plan::PlanConfig& config);

// MakePlan's work after the checks, for one pipeline stage (pp 1) over its dp x tp ranks: ZeRO,
// recompute and the tensor-parallel collectives planned on tp rank 0's graph `local`, expanded to
// every rank of the grid. `config` has its batch triad resolved for topology.dp.
StatusOr<proto::Plan> PlanLocal(const parallel::TpLocalGraph& local, const plan::Topology& topology,
                                const plan::PlanConfig& config);

}  // namespace ds::planner
