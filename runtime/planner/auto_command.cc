#include "runtime/planner/auto_command.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/auto_layout.h"
#include "runtime/planner/fit_advice.h"
#include "runtime/planner/host_rates.h"

namespace ds::planner {

int AutoThreads(int device_threads, int slots) {
  if (device_threads > 0) return device_threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, slots));
}

StatusOr<std::vector<int>> ParseIntList(const std::string& text, const std::string& what) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgumentError(what + " \"" + text + "\": not a list of counts like 2,2");
    }
  }
  if (out.empty()) return InvalidArgumentError(what + " is empty");
  return out;
}

StatusOr<std::string> RunAutoPlan(const AutoRequest& q) {
  DS_ASSIGN_OR_RETURN(config::JobConfig job, config::LoadJobConfig(q.job));
  DS_ASSIGN_OR_RETURN(plan::PlanConfig config, plan::PlanConfigFromJob(job));
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(job));
  if (q.node_slots.empty() ||
      std::any_of(q.node_slots.begin(), q.node_slots.end(), [](int s) { return s < 1; }))
    return InvalidArgumentError(q.job + ": --auto needs the nodes and their slots (--hostfile)");
  const int slots = *std::max_element(q.node_slots.begin(), q.node_slots.end());
  const int threads = q.threads > 0 ? q.threads : AutoThreads(job.device.threads, slots);
  const std::string path = q.rates.empty() ? HostRatesPath(threads) : q.rates;
  auto rates = ReadHostRates(path);
  if (!rates.ok())
    return FailedPreconditionError(
        rates.status().message() + "\n  the cost model needs this host's rates at " +
        std::to_string(threads) + " thread(s) per rank: run `ds-worker calibrate --threads " +
        std::to_string(threads) + "` (a few seconds)");
  AutoOptions o;
  o.node_slots = q.node_slots;
  o.host_of_node = q.host_of_node;
  o.rates = *rates;
  o.host_memory_per_node = q.host_memory_gib > 0
                               ? static_cast<int64_t>(q.host_memory_gib * 1073741824.0)
                               : HostMemoryBytes();
  DS_ASSIGN_OR_RETURN(AutoResult r, SearchLayouts(graph, config, o));
  if (r.layouts.empty()) {
    std::string msg = q.job + ": no layout fits";
    if (r.closest.budget_bytes > 0)
      msg += "; the closest is " + r.closest.Name() + " at " +
             std::to_string(r.closest.peak_bytes >> 20) + " MiB per rank against " +
             std::to_string(r.closest.budget_bytes >> 20) + " MiB";
    for (const std::string& why : r.refusals) msg += "\n  refused: " + why;
    return FailedPreconditionError(msg);
  }
  if (q.json) return AutoResultJson(r, q.top);
  return "rates: " + path + " (" + rates->cpu + ", " + std::to_string(threads) +
         " thread(s) per rank)\n" + FormatAutoResult(r, q.top);
}

}  // namespace ds::planner
