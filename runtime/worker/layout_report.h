// parallel: auto on a rank (runtime/planner/auto_layout.h): the layout ds-launch chose, from
// DS_LAYOUT, applied to the job before anything is planned; started alone (no DS_LAYOUT), the
// rank picks it itself for a world of one with this host's rates. After its third step rank 0
// sets the measured time per instruction kind beside the cost model's prediction
// (DS_LAYOUT_PREDICTION), so the model's errors are visible.
// Also the ranks per node ds-launch passes (DS_NODE_SLOTS).
#pragma once

#include <map>
#include <string>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"

namespace ds::worker {

// Does nothing unless the job says parallel: auto. `job_path` names the file in errors.
Status ApplyAutoLayout(const std::string& job_path, int world, config::JobConfig* config);

// parallel.node_slots from DS_NODE_SLOTS, which ds-launch sets where every node holds as many
// ranks (its plans assume them: qgZ's first all-to-all inside a node); nothing when unset.
Status ApplyNodeSlots(const std::string& job_path, int world, config::JobConfig* config);

// The lines rank 0 prints: per instruction kind, the milliseconds measured over one step
// (`per_step`) beside the predicted ones, and the step itself.
std::string LayoutReport(const std::map<std::string, double>& per_step, double step_ms,
                         const std::map<std::string, double>& predicted);

}  // namespace ds::worker
