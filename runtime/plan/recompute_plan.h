// The recompute pass of MakePlan (plan_builder.cc): with training.recompute, each BACKWARD
// node range is cut at every segment's point and a RECOMPUTE of the segment goes there, so the
// segment's forward runs again just before the backward that reads what it recomputes
// (runtime/graph/recompute.h). Runs before the tensor-parallel pass, which cuts RECOMPUTE
// ranges at their all-reduces as it cuts FORWARD ones.
//
// Pure and deterministic, like MakePlan.
#pragma once

#include <vector>

#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/recompute.h"

namespace ds::plan {

// `plan` holds the dp ranks' streams. InternalError when a segment's point falls in no
// BACKWARD of some micro-batch.
Status InsertRecompute(const Graph& graph, const std::vector<RecomputeSegment>& segments,
                       proto::Plan* plan);

}  // namespace ds::plan
