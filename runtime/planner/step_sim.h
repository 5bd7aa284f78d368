// The cost model's step: every rank's instruction stream played against the host's rates
// (host_rates.h) on two resources per rank, as the step runner executes it: the compute thread
// (forward, backward, recompute, the optimizer, in order) and the communication thread (the
// rank's collectives in issue order; an async one lets compute go on until an instruction's
// wait_for). A collective starts when every member of its group has issued it and finished the
// ones before it, and lasts its ring steps' latency plus the bytes the rank sends over its
// link class (between nodes when the group spans nodes, else inside one); a RECV completes with
// its SEND. So overlap is what the plan schedules and a pipeline's bubbles come from its own
// schedule. Compute slows by the ranks sharing a node's cores.
//
//   DS_ASSIGN_OR_RETURN(StepPrediction p,
//                       PredictStep(plan, graph, config, node_of_rank, host_of_rank, rates));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/host_rates.h"

namespace ds::planner {

struct StepPrediction {
  double step_ms = 0;                        // the slowest rank's end
  double compute_ms = 0;                     // that rank's compute thread busy
  double comm_ms = 0;                        // its collectives' own durations
  double exposed_comm_ms = 0;                // step_ms - compute_ms: what no compute hid
  std::map<std::string, double> kind_ms;     // its time per instruction kind
  int64_t intra_bytes = 0, inter_bytes = 0;  // the most any rank sends per step, by link class
  int slowest_rank = 0;
};

// `node_of_rank[r]`: the node world rank r runs on (as the launcher places ranks: consecutive
// ranks fill a node's slots), which decides a collective's link class; `host_of_rank[r]`: the
// machine whose cores it shares (loopback nodes are one machine), which decides how much its
// compute slows: by (ranks computing at once on the machine x rates.threads) / rates.cores when
// above 1, the ranks computing at once found by playing the step again (a pipeline's ranks idle
// in its bubbles and leave the cores to the others).
// `whole`: the model the plan was made from.
StatusOr<StepPrediction> PredictStep(const proto::Plan& plan, const Graph& whole,
                                     const plan::PlanConfig& config,
                                     const std::vector<int>& node_of_rank,
                                     const std::vector<int>& host_of_rank, const HostRates& rates);

}  // namespace ds::planner
