#include "launcher/launch/job_plans.h"

#include <cstdio>
#include <cstdlib>

#include "launcher/launch/launch_inputs.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_config.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/planner/plan_builder.h"

namespace ds::launcher {
namespace {

StatusOr<int> PositiveInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > 100000)
    return InvalidArgumentError(what + ": \"" + text + "\" is not a node count >= 1");
  return static_cast<int>(v);
}

// The plan of `world` ranks: a configuration the planner rejects fails here, before any
// process starts.
StatusOr<proto::Plan> PlanWorld(const Graph& graph, const plan::PlanConfig& pc, int world,
                                const std::vector<NodeSpec>& nodes, const std::string& path) {
  auto topo = plan::TopologyFor(world, pc);
  if (!topo.ok()) return topo.status().WithPrefix(path);
  if (Status s = CheckTensorGroupsOnNodes(nodes, topo->tp); !s.ok()) return s.WithPrefix(path);
  auto plan = planner::MakePlan(graph, *topo, pc);
  if (!plan.ok()) return plan.status().WithPrefix(path + ": world " + std::to_string(world));
  return std::move(plan).value();
}

}  // namespace

StatusOr<NodeRange> ParseNnodes(const std::string& text, int nodes) {
  if (text.empty()) return NodeRange{};
  const std::string what = "--nnodes " + text;
  const size_t colon = text.find(':');
  NodeRange r;
  DS_ASSIGN_OR_RETURN(r.min_nodes, PositiveInt(text.substr(0, colon), what));
  r.max_nodes = r.min_nodes;
  if (colon != std::string::npos) {
    DS_ASSIGN_OR_RETURN(r.max_nodes, PositiveInt(text.substr(colon + 1), what));
  }
  if (r.min_nodes > r.max_nodes)
    return InvalidArgumentError(what + ": MIN " + std::to_string(r.min_nodes) + " is above MAX " +
                                std::to_string(r.max_nodes));
  if (r.max_nodes > nodes)
    return InvalidArgumentError(what + ": MAX " + std::to_string(r.max_nodes) + " but only " +
                                std::to_string(nodes) + " node(s) are given");
  return r;
}

StatusOr<JobPlans> MakeJobPlans(const config::JobConfig& config, const std::string& path,
                                const std::vector<NodeSpec>& nodes, NodeRange range) {
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(config));
  if (!config.model.hf.empty()) {  // model.hf: its weights fit the model (headers only)
    DS_ASSIGN_OR_RETURN(ModelSpec spec, plan::HfModelSpec(config));
    DS_RETURN_IF_ERROR(ckpt::CheckHfWeights(config.model.hf, spec, graph));
  }
  auto pc = plan::PlanConfigFromJob(config);
  if (!pc.ok()) return pc.status().WithPrefix(path);
  int world = 0;
  for (const NodeSpec& n : nodes) world += n.slots;
  if (config.elasticity.enabled) {  // the batch every size runs (elasticity.h), said once here
    DS_ASSIGN_OR_RETURN(config::ElasticBatch b, config::ComputeElasticBatch(config.elasticity));
    std::string sizes;
    for (size_t i = 0; i < b.valid_sizes.size() && i < 16; ++i)
      sizes += (i ? ", " : "") + std::to_string(b.valid_sizes[i]);
    std::printf(
        "ds-launch: elasticity: train_batch_size %lld, valid at %zu data-parallel size(s): "
        "%s%s\n",
        static_cast<long long>(b.train_batch_size), b.valid_sizes.size(), sizes.c_str(),
        b.valid_sizes.size() > 16 ? ", ..." : "");
  }
  JobPlans out;
  DS_ASSIGN_OR_RETURN(out.plan, PlanWorld(graph, *pc, world, nodes, path));
  out.hashes[world] = plan::HashHex(out.plan.hash());
  if (!range.elastic()) return out;
  for (const NodeSpec& n : nodes)
    if (n.slots != nodes.front().slots)
      return InvalidArgumentError("--nnodes " + std::to_string(range.min_nodes) + ":" +
                                  std::to_string(range.max_nodes) + ": node " + n.name + " has " +
                                  std::to_string(n.slots) + " slots, node " + nodes.front().name +
                                  " " + std::to_string(nodes.front().slots) +
                                  "; an elastic job needs the same on every node");
  for (int k = range.min_nodes; k < range.max_nodes; ++k) {
    const std::vector<NodeSpec> part(nodes.begin(), nodes.begin() + k);
    const int w = k * nodes.front().slots;
    auto plan = PlanWorld(graph, *pc, w, part, path);
    if (!plan.ok())
      return plan.status().WithPrefix("--nnodes " + std::to_string(range.min_nodes) + ":" +
                                      std::to_string(range.max_nodes) + ": on " +
                                      std::to_string(k) + " node(s)");
    out.hashes[w] = plan::HashHex(plan->hash());
  }
  return out;
}

}  // namespace ds::launcher
