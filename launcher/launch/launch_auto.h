// `parallel: auto` at launch: before the plans are made, the planner's cost model ranks every
// layout of the job over the chosen nodes (runtime/planner/auto_layout.h) with this host's rates,
// measuring them first when none are cached (ds-worker calibrate), and across nodes with the
// links measured through the agents (link_probes.h); the fastest that fits is
// applied to the job and handed to every worker (DS_LAYOUT), with its predicted time per
// instruction kind (DS_LAYOUT_PREDICTION) that rank 0 sets its first steps beside.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/launch/launch_inputs.h"
#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/planner/auto_command.h"

namespace ds::launcher {

// The planner's view of the nodes (name, slots) in order: their slots, and the machine each is
// (loopback names are this one; others by name, numbered as first seen).
struct NodeMachines {
  std::vector<int> slots, machine;
};
NodeMachines MachinesOf(const std::vector<std::pair<std::string, int>>& nodes);

// Step 1 of parallel: auto: the request for the job on `nodes`, with this host's rate table
// (measured first when none is cached: ds-worker calibrate); nullopt unless the job says
// parallel: auto. InvalidArgument for --tp / --pp or --nnodes beside it.
StatusOr<std::optional<planner::AutoRequest>> PrepareAutoLayout(const std::vector<NodeSpec>& nodes,
                                                                const std::string& worker,
                                                                const std::string& job_path,
                                                                bool flags_size, bool elastic,
                                                                const config::JobConfig& config);

// Step 2: the fastest layout under `request` (with the links measured at launch where it
// carries them) applied to `config`, and DS_LAYOUT and DS_LAYOUT_PREDICTION in `env`; said on
// stderr, with why it leads the next. Run again after the links are measured, it says whether
// they changed the choice. The planner's errors when nothing fits. The NVMe rates it measured go
// back into `request`, so choosing again does not measure them twice.
Status ApplyAutoLayout(planner::AutoRequest* request, config::JobConfig* config,
                       std::map<std::string, std::string>* env);

}  // namespace ds::launcher
