// The numbers `ds-plan` prints: per rank, the bytes of parameters, gradients, optimizer state, peak
// activations and communication buffers, the peak total, and the bytes each collective kind moves
// per step; beside them the ZeRO paper's arithmetic and DeepSpeed's own estimator
// (shared/reference/deepspeed.md 3.1 and 3.5).
//
//   proto::PlanSummary s = SummarizePlan(plan, "job.yaml");
//   std::fputs(FormatPlanSummary(s).c_str(), stdout);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace ds::plan {

proto::PlanSummary SummarizePlan(const proto::Plan& plan, const std::string& job);

// One rank's memory (its plan's memory walk) and traffic by instruction kind.
proto::RankSummary SummarizeRank(const proto::Plan& plan, const proto::RankPlan& rank);

// The bytes `rank` sends for one instruction: a collective's share with ring algorithms on its
// group, a SEND's payload; 0 otherwise.
int64_t CollectiveSentBytes(const proto::Plan& plan, const proto::Instruction& ins, int rank);

// The world ranks of the group a collective runs on, in the group's (ring) order; for plans that
// name no groups, the dp ranks 0 .. dp-1.
std::vector<int> CollectiveMembers(const proto::Plan& plan, const proto::Instruction& ins);

// A fixed-width table in MiB; one column per rank unless every rank's numbers are the same.
std::string FormatPlanSummary(const proto::PlanSummary& summary);

}  // namespace ds::plan
