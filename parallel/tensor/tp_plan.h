// The tensor-parallel and grid passes of MakePlan (plan_builder.cc), after the ZeRO builders
// planned one dp group's ranks over the tp rank's graph (tp_graph.h):
//
//   InsertTpCollectives  splits each FORWARD / BACKWARD node range at the graph's cut points
//                        and puts an ACT_ALL_REDUCE (ACT_ALL_GATHER, ...) on the tp group
//                        there, or an expert-parallel ACT_ALL_TO_ALL on the ep group
//                        (micro-batch by micro-batch), so the runner only dispatches
//   ExpandToGrid         one RankPlan per world rank (its dp rank's stream), the groups of the
//                        pp x dp x tp grid named in the plan and in every collective (and the
//                        kv groups of replicated key / value heads), and the gradient norm
//                        summed over the world with each replicated parameter counted on tp rank
//                        0 only (a shared kv head on its first holder)
//
// Pure and deterministic, like MakePlan.
#pragma once

#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/plan/model_facts.h"
#include "runtime/plan/parallel_grid.h"

namespace ds::parallel {

inline constexpr const char* kTpGroup = "tp";
inline constexpr const char* kWorldGroup = "world";
inline constexpr const char* kKvGroup = "kv";  // the ranks sharing replicated kv heads
inline constexpr const char* kEpGroup = "ep";  // expert parallelism (ep_graph.h)
inline constexpr const char* kSpGroup = "sp";  // Ulysses (ulysses_graph.h)
// The experts' ZeRO collectives (zero::kEdpGroup): the dp ranks holding the same experts.
inline constexpr const char* kEdpGroup = "edp";
// ZeRO++ hpZ's secondary-partition gathers (zero::kHpzGroup).
inline constexpr const char* kHpzGroup = "hpz";
inline constexpr const char* kHpzAcrossGroup = "hpz_across";  // qgZ's second all-to-all

// `plan` holds the dp ranks' streams (rank = dp rank). `micro_batch` and `seq_len` size the
// collectives. InvalidArgument when a cut falls outside every compute instruction.
Status InsertTpCollectives(const TpLocalGraph& local, const plan::ModelFacts& facts,
                           int64_t micro_batch, int64_t seq_len, proto::Plan* plan);

// A GRAD_NORM_REDUCE `norm` of dp rank `d` with the flat element ranges `flat` ([begin, end),
// sorted) left out of its sum (shard positions by plan's partition when it sums in_shard): what
// another rank counts (tensor parallelism's replicated parameters, a pipeline's tied embedding).
void LeaveOutOfNorm(const proto::Plan& plan, int d,
                    const std::vector<std::pair<int64_t, int64_t>>& flat, proto::Instruction* norm);

// Replaces the dp ranks' streams by the world's and fills plan->groups.
Status ExpandToGrid(const plan::ParallelGrid& grid, const plan::ModelFacts& facts,
                    const TpLocalGraph& local, proto::Plan* plan);

}  // namespace ds::parallel
