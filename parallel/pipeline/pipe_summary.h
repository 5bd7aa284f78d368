// The pipeline part of `ds-plan` (plan_summary.h): per stage its blocks, parameters, activation
// slots, memory and the bytes it sends per step by group (point-to-point, tensor-parallel,
// data-parallel, the tied embedding's sum), and the schedule's bubble: the formula beside a
// simulation of the planned order (pipe_schedule.h), with F = 1 and B = 2 per micro-batch.
//
//   SummarizePipeline(plan, &summary);                 // plan.topology().pp() > 1
//   std::string text = FormatPipelineSummary(summary);
#pragma once

#include <string>

#include "proto/plan.pb.h"

namespace ds::parallel {

// Fills summary->pipeline and sets summary->num_parameters to the whole model's (a parameter
// the first and last stage share counted once).
void SummarizePipeline(const proto::Plan& plan, proto::PlanSummary* summary);

std::string FormatPipelineSummary(const proto::PlanSummary& summary);

}  // namespace ds::parallel
