// What one ZeRO collective works with (package-private: zero_collectives.cc, gather_units.cc):
// the plan, its memory, its communicator and its staging.
#pragma once

#include <cstddef>
#include <vector>

#include "parallel/comm/communicator.h"
#include "proto/plan.pb.h"
#include "runtime/core/dtype.h"
#include "zero/collective_queue.h"
#include "zero/state_view.h"

namespace ds::zero::internal {

struct Op {
  const proto::Plan& plan;
  const proto::Instruction& in;
  int rank;  // in the collective's group
  int dp;    // the group's size
  StateView* v;
  parallel::Communicator* comm;
  char* stage_in;
  char* stage_out;
  DType comm_type;            // the plan's comm dtype of gradient reductions
  char* secondary = nullptr;  // hpZ: this rank's secondary partition (model dtype)
  int dp_rank = 0;            // the rank's place in its dp group (hpZ's slice of a unit)
  // qgZ: the communicators of the collective's hierarchy, in order.
  std::vector<parallel::Communicator*> stages;
  DType t() const { return v->dtype(); }
  size_t ts() const { return DTypeSize(v->dtype()); }
  DType ct() const { return comm_type; }
  size_t cs() const { return DTypeSize(ct()); }
  bool local() const { return in.collective().placement() == proto::LOCAL; }
  const proto::PartitionUnit& unit(int u) const { return plan.partition().units(u); }
};

// Stage 3: the units of a GATHER_PARAMS (from the parameter shard over the dp group) or a
// GATHER_SECONDARY (hpZ: from the secondary partition over the hpz group), quantized by blocks
// on the way when the instruction says (qwZ); a GATHER_PARAMS with fill_secondary also keeps
// the rank's secondary chunks.
Status GatherUnits(const Op& op, CollectiveJob* job);

// qgZ: a stage-3 REDUCE_SCATTER of units whose parts travel as quantized blocks through the
// all-to-alls of op.stages (Note [ZeRO++] in zero/README.md); the rank's part is added into its
// gradient shard and the units' gradients released.
Status QuantizedReduceUnits(const Op& op, CollectiveJob* job);

}  // namespace ds::zero::internal
