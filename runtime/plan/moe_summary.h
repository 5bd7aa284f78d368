// What `ds-launch plan` / ds-plan says about a mixture-of-experts model (after the memory and
// communication tables): the layers, the capacity per expert at the job's micro-batch, the expert
// parameters and the part of them rank 0 keeps states for, and the expert-parallel all-to-alls
// per step (ep_graph.h).
#pragma once

#include <string>

#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"

namespace ds::plan {

// Empty for a dense graph.
std::string FormatMoeSummary(const Graph& graph, const proto::Plan& plan);

}  // namespace ds::plan
