// CheckCollectiveOrder: the plan's no-deadlock property. Within every process group all member
// ranks issue the same collectives in the same order with the same kind, element count, per-rank
// counts and dtype; every SEND has a matching RECV (same order per rank pair, same count and
// dtype); and every wait_for names an earlier async instruction of the same rank.
//
//   DS_RETURN_IF_ERROR(CheckCollectiveOrder(plan));
#pragma once

#include "proto/plan.pb.h"
#include "runtime/base/status.h"

namespace ds::plan {

// FailedPrecondition naming the group, the ranks, the instruction indices and both sides of the
// first mismatch.
Status CheckCollectiveOrder(const proto::Plan& plan);

// Whether instructions of this kind are collectives over a group (not SEND / RECV).
bool IsCollective(proto::Instruction::Kind kind);

}  // namespace ds::plan
