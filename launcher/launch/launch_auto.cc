#include "launcher/launch/launch_auto.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "runtime/base/status_macros.h"
#include "runtime/planner/auto_command.h"
#include "runtime/planner/host_rates.h"

namespace ds::launcher {
namespace {

// Runs `worker calibrate --threads N --out path` and waits for it.
Status Calibrate(const std::string& worker, int threads, const std::string& path) {
  std::fprintf(stderr,
               "ds-launch: parallel: auto: measuring this host's rates once (%s calibrate "
               "--threads %d)\n",
               worker.c_str(), threads);
  const std::string t = std::to_string(threads);
  const pid_t pid = fork();
  if (pid < 0) return InternalError("fork for ds-worker calibrate failed");
  if (pid == 0) {
    execl(worker.c_str(), worker.c_str(), "calibrate", "--threads", t.c_str(), "--out",
          path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return InternalError(worker + " calibrate --threads " + t + " failed");
  return OkStatus();
}

}  // namespace

NodeMachines MachinesOf(const std::vector<std::pair<std::string, int>>& nodes) {
  NodeMachines out;
  std::vector<std::string> names;
  for (const auto& [name, slots] : nodes) {
    const std::string m = IsLoopback(name) ? "localhost" : name;
    auto it = std::find(names.begin(), names.end(), m);
    if (it == names.end()) it = names.insert(names.end(), m);
    out.slots.push_back(std::max(1, slots));
    out.machine.push_back(static_cast<int>(it - names.begin()));
  }
  return out;
}

StatusOr<std::optional<planner::AutoRequest>> PrepareAutoLayout(const std::vector<NodeSpec>& nodes,
                                                                const std::string& worker,
                                                                const std::string& job_path,
                                                                bool flags_size, bool elastic,
                                                                const config::JobConfig& config) {
  if (!config.parallel.auto_layout) return std::optional<planner::AutoRequest>();
  if (flags_size)
    return InvalidArgumentError(job_path +
                                ": parallel: auto picks the tensor and pipeline sizes; "
                                "--tp / --pp contradict it (remove one)");
  if (elastic)
    return InvalidArgumentError(job_path +
                                ": parallel: auto with --nnodes MIN:MAX is not planned (the "
                                "layout would change with the world): give the layout");
  planner::AutoRequest q;
  q.job = job_path;
  std::vector<std::pair<std::string, int>> named;
  for (const NodeSpec& n : nodes) named.push_back({n.name, n.slots});
  const NodeMachines m = MachinesOf(named);
  q.node_slots = m.slots;
  q.host_of_node = m.machine;
  const int slots = *std::max_element(q.node_slots.begin(), q.node_slots.end());
  q.threads = planner::AutoThreads(config.device.threads, slots);
  q.rates = planner::HostRatesPath(q.threads);
  struct stat st;
  if (stat(q.rates.c_str(), &st) != 0) DS_RETURN_IF_ERROR(Calibrate(worker, q.threads, q.rates));
  return std::optional<planner::AutoRequest>(q);
}

Status ApplyAutoLayout(planner::AutoRequest* request, config::JobConfig* config,
                       std::map<std::string, std::string>* env) {
  const planner::AutoRequest& q = *request;
  DS_ASSIGN_OR_RETURN(planner::AutoChoice c, planner::ChooseLayout(*config, q));
  request->nvme_read_gbps = c.nvme_read_gbps;  // the choice again (SettleLayout) reuses them
  request->nvme_write_gbps = c.nvme_write_gbps;
  const std::string spec = planner::LayoutSpec(c.layout);
  DS_RETURN_IF_ERROR(planner::ApplyLayoutSpec(spec, config));
  const auto before = env->find("DS_LAYOUT");
  if (before != env->end() && before->second != spec)
    std::fprintf(stderr, "ds-launch: parallel: auto: the measured links change the layout\n");
  (*env)["DS_LAYOUT"] = spec;
  (*env)["DS_LAYOUT_PREDICTION"] = planner::PredictionSpec(c.layout.prediction);
  std::fprintf(stderr,
               "ds-launch: parallel: auto: %s, predicted %.1f ms a step (%.0f tokens/s; %zu "
               "layouts fit of %d planned in %.2f s; rates %s%s)\n",
               c.layout.Name().c_str(), c.layout.prediction.step_ms, c.layout.tokens_per_s,
               c.result.layouts.size(), c.result.planned, c.result.search_ms / 1e3,
               c.rates_path.c_str(), q.inter_link || q.intra_link ? ", links as measured" : "");
  std::fprintf(stderr, "ds-launch: parallel: auto: rates: %s\n", c.rates_note.c_str());
  if (c.result.layouts.size() >= 2)
    std::fprintf(stderr, "ds-launch: parallel: auto: %s\n",
                 planner::ExplainLead(c.result.layouts[0], c.result.layouts[1]).c_str());
  return OkStatus();
}

}  // namespace ds::launcher
