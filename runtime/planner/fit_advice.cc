#include "runtime/planner/fit_advice.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/planner/plan_builder.h"

namespace ds::planner {
namespace {

std::string GiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  return text;
}

int64_t PeakOf(const proto::Plan& plan) {
  int64_t peak = 0;
  for (const proto::RankPlan& rp : plan.ranks()) peak = std::max(peak, rp.memory().peak_bytes());
  return peak;
}

struct Candidate {
  std::string change;  // what to write in zero_optimization
  plan::PlanConfig config;
};

// The offloads to try, least intrusive first. NVMe sub-groups of 25M elements keep the swap
// buffers near 0.3 GB each (DeepSpeed's default of 1e9 would pin 12 GB per sub-group).
std::vector<Candidate> Candidates(const plan::PlanConfig& c) {
  std::vector<Candidate> out;
  plan::PlanConfig opt = c;
  opt.optimizer_nvme = true;
  opt.sub_group_size = std::min<int64_t>(c.sub_group_size, 25000000);
  opt.swap_buffer_count = std::max(c.swap_buffer_count, 6);
  opt.pipeline_read = opt.pipeline_write = true;
  const std::string nvme =
      "offload_optimizer: {device: nvme, nvme_path: <dir>, buffer_count: 6, pipeline_read: true, "
      "pipeline_write: true}, sub_group_size: 25000000";
  if (!c.optimizer_nvme && c.stage >= 1) out.push_back({nvme, opt});
  plan::PlanConfig s3 = opt;
  s3.stage = 3;
  if (c.stage < 3) out.push_back({"stage: 3, " + nvme, s3});
  if (c.model_dtype != DType::kF32 && !c.param_nvme) {
    plan::PlanConfig all = s3;
    all.param_nvme = true;
    out.push_back({"stage: 3, " + nvme + ", offload_param: {device: nvme, nvme_path: <dir>}", all});
  }
  return out;
}

}  // namespace

int64_t HostMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

StatusOr<std::string> FitAdvice(const Graph& graph, const plan::PlanConfig& config, int world,
                                int64_t budget) {
  DS_ASSIGN_OR_RETURN(plan::Topology topo, plan::TopologyFor(world, config));
  DS_ASSIGN_OR_RETURN(proto::Plan plan, MakePlan(graph, topo, config));
  const int64_t peak = PeakOf(plan);
  const std::string room = GiB(budget) + " of host memory per rank";
  if (config.states_on_device)
    return "fit: the model states are on the device; the host holds " + GiB(peak) +
           " per rank of the plan's buffers\n";
  if (peak <= budget)
    return "fit: the planned peak of " + GiB(peak) + " per rank fits " + room + "\n";
  std::string out = "does not fit: the planned peak of " + GiB(peak) + " per rank exceeds " + room;
  for (const Candidate& c : Candidates(config)) {
    auto alt = MakePlan(graph, topo, c.config);
    if (!alt.ok()) continue;
    const int64_t p = PeakOf(*alt);
    if (p > budget) continue;
    const int64_t nvme = alt->swap().file_bytes() + alt->swap().param_file_bytes();
    return out + "\n  it fits with zero_optimization {" + c.change + "}: peak " + GiB(p) +
           " per rank, " + GiB(nvme) + " per rank on NVMe\n";
  }
  return out + "\n  no offload makes it fit: add ranks (more data-parallel shards) or memory\n";
}

}  // namespace ds::planner
