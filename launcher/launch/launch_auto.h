// `parallel: auto` at launch: before the plans are made, the planner's cost model ranks every
// layout of the job over the chosen nodes (runtime/planner/auto_layout.h) with this host's rates,
// measuring them first when none are cached (ds-worker calibrate); the fastest that fits is
// applied to the job and handed to every worker (DS_LAYOUT), with its predicted time per
// instruction kind (DS_LAYOUT_PREDICTION) that rank 0 sets its first steps beside.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/launch/launch_inputs.h"
#include "runtime/base/status.h"
#include "runtime/config/job_config.h"

namespace ds::launcher {

// The planner's view of the nodes (name, slots) in order: their slots, and the machine each is
// (loopback names are this one; others by name, numbered as first seen).
struct NodeMachines {
  std::vector<int> slots, machine;
};
NodeMachines MachinesOf(const std::vector<std::pair<std::string, int>>& nodes);

// Does nothing unless the job says parallel: auto. Else applies the chosen layout to `config`
// and fills `env` with DS_LAYOUT and DS_LAYOUT_PREDICTION. InvalidArgument for --tp / --pp or
// --nnodes beside parallel: auto; the planner's errors when nothing fits.
Status ResolveAutoLayout(const std::vector<NodeSpec>& nodes, const std::string& worker,
                         const std::string& job_path, bool flags_size, bool elastic,
                         config::JobConfig* config, std::map<std::string, std::string>* env);

}  // namespace ds::launcher
