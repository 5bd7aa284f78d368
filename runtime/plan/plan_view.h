// RankView: the plan as one rank runs it. With a pipeline (topology.pp > 1) each pipeline rank
// runs a model of its own (its stage graph), so its flat layout, ZeRO partition, gradient buckets,
// buffers and NVMe sub-groups live in Plan.stages; the view puts the rank's stage in the Plan
// fields of the same names, so the step runner, the ZeRO state views, the memory walk and the
// checkpoint code read one plan whatever the layout. Without a pipeline the view is the plan
// itself.
//
//   const proto::Plan mine = RankView(plan, rank);   // hash and every rank's stream kept
//   DS_ASSIGN_OR_RETURN(auto runner, StepRunner::Create(&mine, rank, parts));
#pragma once

#include "proto/plan.pb.h"

namespace ds::plan {

// The stage rank `rank` runs (RankPlan.stage), 0 without a pipeline or for a rank the plan lacks.
int StageOf(const proto::Plan& plan, int rank);

proto::Plan RankView(const proto::Plan& plan, int rank);

// Puts stage `stage`'s layout in the plan's top-level fields (RankView's work, in place).
void SelectStage(int stage, proto::Plan* plan);

}  // namespace ds::plan
