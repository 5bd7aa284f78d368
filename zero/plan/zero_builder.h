// The ZeRO stage builders the planner calls (runtime/plan/plan_builder.cc). For ZeRO stage 0-3
// over the dp ranks they partition the model (Note [Plan layout] in zero_builder.cc), add the
// model-state, activation, gradient-bucket and gather buffers, build the step's instruction
// stream (dense_stream.cc for stages 0-2, stage3_stream.cc for stage 3), place every
// instruction and collective (placement.cc, Note [Placement] in zero/README.md) and write one
// RankPlan per rank with the ranges that rank steps and sums its norm over.
//
//   DS_RETURN_IF_ERROR(zero::CheckZeroSettings(config));
//   DS_RETURN_IF_ERROR(zero::BuildZeroPlan(facts, config, dp, &plan));
//
// Pure and deterministic, like MakePlan.
#pragma once

#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/plan/model_facts.h"
#include "runtime/plan/plan_config.h"

namespace ds::zero {

// The process group ZeRO shards over, and (expert parallelism) the one it shards the experts'
// parameters over: the dp ranks holding the same experts.
inline constexpr const char* kDpGroup = "dp";
inline constexpr const char* kEdpGroup = "edp";
// hpZ's group: consecutive runs of zero_hpz_partition_size ranks of the dp group.
inline constexpr const char* kHpzGroup = "hpz";
// qgZ's second all-to-all with hpZ: the dp ranks at the same place of every hpz group.
inline constexpr const char* kHpzAcrossGroup = "hpz_across";

// InvalidArgument naming the zero_optimization key for a setting that cannot work: a stage
// outside 0..3, a bucket size <= 0, a negative stage-3 knob.
Status CheckZeroSettings(const plan::PlanConfig& config);

// Fills plan's model, partition, buckets, buffers and ranks (one per dp rank; settings,
// topology and groups are the caller's). `config` has its batch triad resolved.
// InvalidArgument when stage3_max_live_parameters is below what one block gathers;
// Unimplemented for a placement the runtime cannot carry out (stage 3 with the states on the
// device without device collectives, or with a communication dtype apart from the model's).
// ep > 1: the expert parameters (ParamFacts::expert) are this rank's experts only, and their
// units are split over the dp / ep ranks that hold the same ones.
Status BuildZeroPlan(const plan::ModelFacts& facts, const plan::PlanConfig& config, int dp,
                     proto::Plan* plan, int ep = 1);

// ZeRO++'s qwZ and qgZ: how `config`'s parameter gathers and stage-3 gradient reductions are
// quantized (bits 0 without them).
proto::Quantization WeightQuantization(const plan::PlanConfig& config);
proto::Quantization GradientQuantization(const plan::PlanConfig& config);
// The dp ranks of qgZ's first all-to-all and of hpZ's groups (the grid's `hpz` groups): hpZ's
// partition size; else, with qgZ and every node holding node_slots ranks, the dp ranks one node
// holds (node_slots / tp) where that splits the dp group; else 1 (qgZ's one all-to-all over dp).
int QgzLocalSize(const plan::PlanConfig& config, int dp);

}  // namespace ds::zero
