// What `ds-launch plan` / ds-plan says about the all-to-all layouts (after the memory and
// communication tables). A mixture-of-experts model: the layers, the capacity per expert at the
// job's micro-batch, the expert parameters and the part of them rank 0 keeps states for, and the
// expert-parallel all-to-alls per step (ep_graph.h). Ulysses: the bytes each rank exchanges per
// layer beside DeepSpeed's 4Nh/P and Megatron-SP's 4Nh (ulysses_graph.h).
#pragma once

#include <string>

#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"

namespace ds::parallel {

// Empty for a dense graph.
std::string FormatMoeSummary(const Graph& graph, const proto::Plan& plan);
// Empty without Ulysses (topology.sp <= 1).
std::string FormatUlyssesSummary(const Graph& graph, const proto::Plan& plan);

}  // namespace ds::parallel
