// What a worker the agent starts gets: its share of the node's CPUs and its environment (the
// agent's own without the per-rank variables, then RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE,
// NODE_RANK, the DS_* variables of the coordinator, the TLS identity, the round, resume and the
// in-memory copies, OMP_NUM_THREADS and the GPU it is pinned to).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/agent/agent.h"
#include "launcher/coordinator/coordinator_types.h"

namespace ds::launcher {

using Env = std::vector<std::pair<std::string, std::string>>;

// The CPUs this process may run on, split into `parts` contiguous shares (shared round-robin
// when there are fewer CPUs than parts).
std::vector<std::vector<int>> SplitCpus(int parts);

// The agent's environment without the variables each rank gets its own value of.
Env InheritedEnv();

// Local rank `i`'s environment: `env` (InheritedEnv and the job's) and the rank's variables;
// `copy_dir`: the agent's in-memory copy directory ("" = none), `cpus`: the rank's CPU count.
Env WorkerEnv(const AgentOptions& opt, const JoinResult& join, const std::string& copy_dir, Env env,
              int i, size_t cpus);

}  // namespace ds::launcher
