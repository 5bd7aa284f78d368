// The step plans ds-launch makes before any process starts: the plan of the job's world, and
// with --nnodes MIN:MAX (torchrun's form: an elastic job that goes on with fewer nodes when one
// is lost) the plan of every world it may shrink to, each checked now: a world the batch does not
// divide fails before anything starts, naming it. Every worker compares its own plan with the
// hash of its world (DS_PLAN_HASH; DS_PLAN_HASHES "WORLD=HASH,..." for an elastic job).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/config/job_config.h"

namespace ds::launcher {

// --nnodes: "N" or "MIN:MAX" nodes of the `nodes` the hostfile gives; {0, 0} when `text` is
// empty. MIN above MAX, or MAX above the nodes given, is an error naming the flag.
struct NodeRange {
  int min_nodes = 0, max_nodes = 0;
  bool elastic() const { return min_nodes < max_nodes; }
};
StatusOr<NodeRange> ParseNnodes(const std::string& text, int nodes);

struct JobPlans {
  proto::Plan plan;                   // the job's world: every node's slots
  std::map<int, std::string> hashes;  // world -> plan hash (hex), each world the job may run at
};
// `path`: the config file, for messages. An elastic range needs the same slots on every node
// (a lost node then always takes the same number of ranks away).
StatusOr<JobPlans> MakeJobPlans(const config::JobConfig& config, const std::string& path,
                                const std::vector<NodeSpec>& nodes, NodeRange range);

}  // namespace ds::launcher
