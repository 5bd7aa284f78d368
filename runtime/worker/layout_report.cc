#include "runtime/worker/layout_report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "runtime/base/status_macros.h"
#include "runtime/planner/auto_command.h"

namespace ds::worker {

Status ApplyAutoLayout(const std::string& job_path, int world, config::JobConfig* config) {
  if (!config->parallel.auto_layout) return OkStatus();
  const char* spec = std::getenv("DS_LAYOUT");
  if (spec && *spec) {
    DS_RETURN_IF_ERROR(planner::ApplyLayoutSpec(spec, config).WithPrefix(job_path));
  } else {
    if (world != 1)
      return InvalidArgumentError(job_path + ": parallel: auto across " + std::to_string(world) +
                                  " ranks is chosen by ds-launch (DS_LAYOUT is not set)");
    planner::AutoRequest q;
    q.job = job_path;
    q.node_slots = {1};
    DS_ASSIGN_OR_RETURN(planner::AutoChoice c, planner::ChooseLayout(*config, q));
    DS_RETURN_IF_ERROR(planner::ApplyLayoutSpec(planner::LayoutSpec(c.layout), config));
    std::printf("parallel: auto: %s, predicted %.1f ms a step\n", c.layout.Name().c_str(),
                c.layout.prediction.step_ms);
    setenv("DS_LAYOUT_PREDICTION", planner::PredictionSpec(c.layout.prediction).c_str(), 1);
  }
  const char* predicted = std::getenv("DS_LAYOUT_PREDICTION");
  config->parallel.layout_predicted = predicted && *predicted;
  return OkStatus();
}

Status ApplyNodeSlots(const std::string& job_path, int world, config::JobConfig* config) {
  const char* v = std::getenv("DS_NODE_SLOTS");
  if (!v || !*v) return OkStatus();
  char* end = nullptr;
  const long slots = std::strtol(v, &end, 10);
  if (*end != '\0' || slots < 1 || world % slots != 0)
    return InvalidArgumentError(job_path + ": DS_NODE_SLOTS \"" + v +
                                "\" (from ds-launch) is not a node's ranks of a world of " +
                                std::to_string(world));
  config->parallel.node_slots = static_cast<int>(slots);
  return OkStatus();
}

std::string LayoutReport(const std::map<std::string, double>& per_step, double step_ms,
                         const std::map<std::string, double>& predicted) {
  std::string out = "parallel: auto: measured against predicted, ms per step\n";
  char line[160];
  auto row = [&](const std::string& what, double measured, double model) {
    const double err = measured > 0 ? (model - measured) / measured : 0;
    std::snprintf(line, sizeof line, "  %-24s %10.1f %10.1f %+8.1f%%\n", what.c_str(), measured,
                  model, 100 * err);
    out += line;
  };
  std::snprintf(line, sizeof line, "  %-24s %10s %10s %9s\n", "instruction kind", "measured",
                "predicted", "error");
  out += line;
  std::set<std::string> kinds;
  for (const auto& [k, v] : per_step) kinds.insert(k);
  for (const auto& [k, v] : predicted)
    if (k != "step") kinds.insert(k);
  for (const std::string& k : kinds) {
    const auto m = per_step.find(k), p = predicted.find(k);
    const double measured = m == per_step.end() ? 0 : m->second;
    const double model = p == predicted.end() ? 0 : p->second;
    if (measured < 0.05 && model < 0.05) continue;
    row(k, measured, model);
  }
  row("step", step_ms, predicted.count("step") ? predicted.at("step") : 0);
  return out;
}

}  // namespace ds::worker
