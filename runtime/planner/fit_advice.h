// FitAdvice: whether a job's planned per-rank peak fits the host memory each rank gets, and,
// when it does not, the first offload that would make it fit (ZeRO-Offload / ZeRO-Infinity:
// optimizer states to NVMe, then stage 3 with the parameters there too), found by planning the
// job again with that change. What `ds-plan` / `ds-launch plan` print under the memory table.
//
//   DS_ASSIGN_OR_RETURN(std::string text, FitAdvice(graph, config, world, per_rank_bytes));
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"

namespace ds::planner {

// `budget` is the host memory per rank (bytes). Plans with the model states on a device are
// judged on their host part only, so they always "fit" here. Errors only from planning the job
// as given.
StatusOr<std::string> FitAdvice(const Graph& graph, const plan::PlanConfig& config, int world,
                                int64_t budget);

// MemTotal of this machine (bytes), 0 when /proc/meminfo cannot be read.
int64_t HostMemoryBytes();

}  // namespace ds::planner
