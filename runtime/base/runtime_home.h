// Where ds-runtime keeps its per-user state: $DS_RUNTIME_HOME, else ~/.ds-runtime ($HOME unset:
// /tmp/.ds-runtime). ds-launch's job directories (launcher/launch/job_dir.h) and the planner's
// cached host rates (runtime/planner/host_rates.h) live under it.
#pragma once

#include <string>

namespace ds {

std::string RuntimeHome();

}  // namespace ds
