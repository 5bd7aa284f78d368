// The memory timeline of one rank: walks its instruction stream over the buffers' live ranges
// (whole-step buffers from the start; others from the instruction that allocs them through the one
// that frees them) and reports the peak, the bytes by kind at the peak, each kind's own maximum,
// and the model-state bytes (params, grads, fp32 master, optimizer states).
//
//   DS_ASSIGN_OR_RETURN(proto::MemorySummary m, WalkMemory(plan, 0));
#pragma once

#include "proto/plan.pb.h"
#include "runtime/base/status.h"

namespace ds::plan {

// Internal error if the stream allocates a live buffer, frees a dead one, names an unknown buffer,
// or ends with a transient buffer still live; InvalidArgument for a bad rank.
StatusOr<proto::MemorySummary> WalkMemory(const proto::Plan& plan, int rank);

// True for the kinds that make up ZeRO's "model states".
bool IsModelState(proto::PlanBuffer::Kind kind);

}  // namespace ds::plan
