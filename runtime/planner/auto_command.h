// `ds-plan JOB --auto` / `ds-launch plan JOB --hostfile H --auto`: the layouts of the job over
// the given nodes, ranked by the cost model (auto_layout.h), as a table or JSON. The host's rate
// table is read from `rates` (default: host_rates.h's HostRatesPath for the threads per rank);
// without one it says how to make it (`ds-worker calibrate --threads N`; ds-launch runs that
// itself).
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::planner {

struct AutoRequest {
  std::string job;
  std::vector<int> node_slots;    // ranks per node
  std::vector<int> host_of_node;  // the machine of each node (empty: each its own)
  int threads = 0;                // per rank; 0: device.threads, else cores / slots on a node
  std::string rates;              // the rate table; empty: HostRatesPath(threads)
  double host_memory_gib = 0;     // per machine; 0: this machine's
  bool json = false;
  int top = 10;
};

// The threads per rank the job runs with on a node of `slots` slots here: device.threads, else
// the cores shared out (what the agent gives OMP_NUM_THREADS).
int AutoThreads(int device_threads, int slots);

StatusOr<std::string> RunAutoPlan(const AutoRequest& request);

// "2,2" -> {2, 2}; InvalidArgument naming `what` for anything but positive integers.
StatusOr<std::vector<int>> ParseIntList(const std::string& text, const std::string& what);

}  // namespace ds::planner
