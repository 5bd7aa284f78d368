// What each rank owns under a plan's ZeRO partition (proto::PlanPartition): the ShardLayout
// ParamStore::Shard takes, and the owned part of one partition unit. Pure functions of the plan.
//
//   params.Shard(zero::LayoutFor(plan, rank, params.total_elements()));
#pragma once

#include <cstdint>
#include <utility>

#include "zero/param_store.h"

namespace ds::proto {
class Plan;
class PartitionUnit;
}  // namespace ds::proto

namespace ds::zero {

// Everything at stage 0; its chunk of the flat buffer at stages 1-2; its chunk of every
// partition unit, in shard space, at stage 3 (with the gradient bucket arena from stage 2).
ShardLayout LayoutFor(const proto::Plan& plan, int rank, int64_t total_elements);

// World rank `rank`'s place in its data-parallel group: what indexes the partition's chunks
// (Megatron's grid order, runtime/plan/parallel_grid.h: tp fastest, then dp).
int DpRankOf(const proto::Plan& plan, int rank);

// Expert parallelism: how many ranks unit `u` is split over (dp, or dp / ep for the experts'
// units: the edp group), and world rank `rank`'s place among them (its dp rank, or dp rank / ep).
int UnitRanks(const proto::Plan& plan, const proto::PartitionUnit& u);
int UnitRankOf(const proto::Plan& plan, const proto::PartitionUnit& u, int rank);

// The flat range [first, second) group rank `rank` (UnitRankOf) owns of unit `u` (empty past
// the unit's end).
std::pair<int64_t, int64_t> OwnedOfUnit(const proto::PartitionUnit& u, int rank);

}  // namespace ds::zero
