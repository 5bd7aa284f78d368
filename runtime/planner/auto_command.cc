#include "runtime/planner/auto_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/auto_layout.h"
#include "runtime/planner/fit_advice.h"
#include "runtime/planner/host_rates.h"
#include "zero/aio/io_rates.h"

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

StatusOr<LinkRate> ParseLinkRate(const std::string& text, const std::string& what) {
  LinkRate r;
  const size_t at = text.find('@');
  try {
    size_t used = 0;
    const std::string gbps = text.substr(0, at);
    r.gbps = std::stod(gbps, &used);
    if (used != gbps.size() || !(r.gbps > 0)) throw std::invalid_argument(gbps);
    if (at != std::string::npos) {
      const std::string us = text.substr(at + 1);
      r.latency_us = std::stod(us, &used);
      if (used != us.size() || !(r.latency_us >= 0)) throw std::invalid_argument(us);
    }
  } catch (const std::exception&) {
    return InvalidArgumentError(what + " \"" + text +
                                "\": not a rate like 12.5 (GB/s a rank sends at) or 12.5@20 "
                                "(and its latency in microseconds)");
  }
  return r;
}

// A job that offloads to NVMe (device nvme, or auto: the search's choice) has its swaps timed at
// the I/O engine's rates on its nvme_path, measured here (a 256 MiB file written and read, about
// a second) unless the request carries them.
Status MeasureNvme(const config::JobConfig& job, const AutoRequest& q, AutoOptions* o,
                   AutoChoice* c) {
  using config::OffloadDevice;
  const config::OffloadConfig &oo = job.zero.offload_optimizer, &op = job.zero.offload_param;
  if (oo.device == OffloadDevice::kAuto) o->offload_max = op.device == OffloadDevice::kAuto ? 2 : 1;
  if (oo.device != OffloadDevice::kAuto && oo.device != OffloadDevice::kNvme) return OkStatus();
  zero::IoRates io{q.nvme_read_gbps, q.nvme_write_gbps};
  if (io.read_gbps <= 0 || io.write_gbps <= 0) {
    zero::IoOptions aio;
    aio.block_size = job.aio.block_size;
    aio.queue_depth = job.aio.queue_depth;
    aio.intra_op_parallelism = job.aio.intra_op_parallelism;
    aio.single_submit = job.aio.single_submit;
    aio.overlap_events = job.aio.overlap_events;
    DS_ASSIGN_OR_RETURN(io, zero::MeasureIoRates(oo.nvme_path, int64_t{256} << 20, aio));
  }
  o->rates.nvme_read_gbps = c->nvme_read_gbps = io.read_gbps;
  o->rates.nvme_write_gbps = c->nvme_write_gbps = io.write_gbps;
  char rates[64];
  std::snprintf(rates, sizeof rates, ": read %.2f, write %.2f GB/s", io.read_gbps, io.write_gbps);
  c->rates_note += "; NVMe at " + oo.nvme_path + rates;
  return OkStatus();
}

// Where the links' rates come from: measured at launch or given (and what they are), or the
// table's loopback rate for both classes, which a job across nodes should know.
std::string LinkNote(const AutoRequest& q) {
  auto link = [](const char* what, const LinkRate& r) {
    char text[96];
    std::snprintf(text, sizeof text, ", %s %.4g GB/s, %.3g us", what, r.gbps, r.latency_us);
    return std::string(text);
  };
  if (q.intra_link || q.inter_link) {
    std::string note = "; links " + q.link_source;
    if (q.intra_link) note += link("inside a node", *q.intra_link);
    if (q.inter_link) note += link("between nodes", *q.inter_link);
    return note;
  }
  if (q.node_slots.size() < 2) return "";
  return "; both link classes at this host's loopback rate (a launch measures the job's links; "
         "--inter-link GBPS[@US] gives them)";
}

StatusOr<AutoChoice> ChooseLayout(const config::JobConfig& job, const AutoRequest& q) {
  DS_ASSIGN_OR_RETURN(plan::PlanConfig config, plan::PlanConfigFromJob(job));
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(job));
  if (q.node_slots.empty() ||
      std::any_of(q.node_slots.begin(), q.node_slots.end(), [](int s) { return s < 1; }))
    return InvalidArgumentError(q.job + ": --auto needs the nodes and their slots (--hostfile)");
  if (config.train_batch_size < 1)
    return InvalidArgumentError(q.job +
                                ": parallel: auto needs train_batch_size (the global "
                                "batch the layouts share)");
  const int slots = *std::max_element(q.node_slots.begin(), q.node_slots.end());
  const int threads = q.threads > 0 ? q.threads : AutoThreads(job.device.threads, slots);
  AutoChoice c;
  c.rates_path = q.rates.empty() ? HostRatesPath(threads) : q.rates;
  auto rates = ReadHostRates(c.rates_path);
  if (!rates.ok())
    return FailedPreconditionError(
        rates.status().message() + "\n  the cost model needs this host's rates at " +
        std::to_string(threads) + " thread(s) per rank: run `ds-worker calibrate --threads " +
        std::to_string(threads) + "` (a few seconds)");
  c.rates_note = rates->cpu + ", " + std::to_string(threads) + " thread(s) per rank";
  if (q.intra_link) rates->intra = Slower(rates->intra, *q.intra_link);
  if (q.inter_link) rates->inter = Slower(rates->inter, *q.inter_link);
  c.rates_note += LinkNote(q);
  AutoOptions o;
  o.node_slots = q.node_slots;
  o.host_of_node = q.host_of_node;
  o.rates = *rates;
  o.host_memory_per_node = q.host_memory_gib > 0
                               ? static_cast<int64_t>(q.host_memory_gib * 1073741824.0)
                               : HostMemoryBytes();
  o.micro = job.train_micro_batch_size_per_gpu;
  o.gas = job.gradient_accumulation_steps;
  o.recompute_given = job.recompute.given;
  o.schedule_given = job.pipeline.schedule != "1f1b";
  DS_RETURN_IF_ERROR(MeasureNvme(job, q, &o, &c));
  DS_ASSIGN_OR_RETURN(c.result, SearchLayouts(graph, config, o));
  if (c.result.layouts.empty()) {
    const AutoResult& r = c.result;
    std::string msg = q.job + ": no layout fits";
    if (r.closest.budget_bytes > 0)
      msg += "; the closest is " + r.closest.Name() + " at " +
             std::to_string(r.closest.peak_bytes >> 20) + " MiB per rank against " +
             std::to_string(r.closest.budget_bytes >> 20) + " MiB";
    for (const std::string& why : r.refusals) msg += "\n  refused: " + why;
    return FailedPreconditionError(msg);
  }
  c.layout = c.result.layouts[0];
  return c;
}

StatusOr<std::string> RunAutoPlan(const AutoRequest& q) {
  DS_ASSIGN_OR_RETURN(config::JobConfig job, config::LoadJobConfig(q.job));
  DS_ASSIGN_OR_RETURN(AutoChoice c, ChooseLayout(job, q));
  if (q.json) return AutoResultJson(c.result, q.top);
  return "rates: " + c.rates_path + " (" + c.rates_note + ")\n" + FormatAutoResult(c.result, q.top);
}

std::string LayoutSpec(const Layout& l) {
  return "tensor=" + std::to_string(l.tp) + " pipeline=" + std::to_string(l.pp) +
         " stage=" + std::to_string(l.stage) + " micro=" + std::to_string(l.micro) +
         " gas=" + std::to_string(l.gas) + " recompute=" + RecomputeModeName(l.recompute) +
         " ulysses=" + std::to_string(l.sp) + " expert=" + std::to_string(l.ep) +
         " schedule=" + plan::PipeScheduleName(l.schedule) +
         " virtual=" + std::to_string(l.virtual_stages) + " hpz=" + std::to_string(l.hpz) +
         " offload=" + std::to_string(l.offload);
}

Status ApplyLayoutSpec(const std::string& spec, config::JobConfig* job) {
  std::stringstream in(spec);
  std::string item;
  int seen = 0;
  while (in >> item) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq),
                      value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    const bool number = !value.empty() && *end == '\0' && n >= 0;
    RecomputeMode mode;
    plan::PipeScheduleKind schedule;
    if (key == "recompute" && ParseRecomputeMode(value, &mode)) {
      job->recompute.mode = value;
    } else if (key == "schedule" && plan::ParsePipeSchedule(value, &schedule)) {
      job->pipeline.schedule = value;
    } else if (!number) {
      return InvalidArgumentError("DS_LAYOUT \"" + spec + "\": cannot read \"" + item + "\"");
    } else if (key == "tensor") {
      job->parallel.tensor = static_cast<int>(n);
    } else if (key == "pipeline") {
      job->parallel.pipeline = static_cast<int>(n);
    } else if (key == "stage") {
      job->zero.stage = static_cast<int>(n);
    } else if (key == "micro") {
      job->train_micro_batch_size_per_gpu = n;
    } else if (key == "gas") {
      job->gradient_accumulation_steps = n;
    } else if (key == "ulysses") {
      job->parallel.ulysses = static_cast<int>(n);
    } else if (key == "expert") {
      job->parallel.expert = static_cast<int>(n);
    } else if (key == "virtual") {
      job->pipeline.virtual_stages = static_cast<int>(n);
    } else if (key == "hpz") {  // 1: the job's own
      if (n > 1) job->zero.hpz_partition_size = static_cast<int>(n);
    } else if (key == "offload") {  // device auto becomes none or nvme; a given device stays
      for (auto [block, at] :
           {std::pair{&job->zero.offload_optimizer, 1}, std::pair{&job->zero.offload_param, 2}})
        if (block->device == config::OffloadDevice::kAuto)
          block->device = n >= at ? config::OffloadDevice::kNvme : config::OffloadDevice::kNone;
      if (n >= 1)  // as Layout::Apply
        job->zero.sub_group_size = std::min(job->zero.sub_group_size, kAutoSubGroupSize);
    } else {
      return InvalidArgumentError("DS_LAYOUT \"" + spec + "\": unknown \"" + key + "\"");
    }
    ++seen;
  }
  if (seen != 12) return InvalidArgumentError("DS_LAYOUT \"" + spec + "\": needs the twelve parts");
  job->parallel.auto_layout = false;
  return OkStatus();
}

std::string PredictionSpec(const StepPrediction& p) {
  char s[64];
  std::snprintf(s, sizeof s, "step=%.3f", p.step_ms);
  std::string out = s;
  for (const auto& [kind, ms] : p.kind_ms) {
    std::snprintf(s, sizeof s, " %s=%.3f", kind.c_str(), ms);
    out += s;
  }
  return out;
}

std::map<std::string, double> ParsePredictionSpec(const std::string& spec) {
  std::map<std::string, double> out;
  std::stringstream in(spec);
  std::string item;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    out[item.substr(0, eq)] = std::strtod(item.c_str() + eq + 1, nullptr);
  }
  return out;
}

}  // namespace ds::planner
