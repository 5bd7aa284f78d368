// `ds-plan JOB --auto` / `ds-launch plan JOB --hostfile H --auto`: the layouts of the job over
// the given nodes, ranked by the cost model (auto_layout.h), as a table or JSON. The host's rate
// table is read from `rates` (default: host_rates.h's HostRatesPath for the threads per rank);
// without one it says how to make it (`ds-worker calibrate --threads N`; ds-launch runs that
// itself).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/planner/auto_layout.h"

namespace ds::planner {

struct AutoRequest {
  std::string job;
  std::vector<int> node_slots;    // ranks per node
  std::vector<int> host_of_node;  // the machine of each node (empty: each its own)
  int threads = 0;                // per rank; 0: device.threads, else cores / slots on a node
  std::string rates;              // the rate table; empty: HostRatesPath(threads)
  double host_memory_gib = 0;     // per machine; 0: this machine's
  // The links measured at launch (ds-launch's link probes) or given (`plan --auto
  // --inter-link`): each class's rate is the slower of the table's and this one (Slower).
  // link_source says which ("measured at launch", "given"); without either the table's own
  // (two ranks of this host over loopback) prices both classes, and the output says so.
  std::optional<LinkRate> intra_link, inter_link;
  std::string link_source = "measured at launch";
  // The I/O rates of the job's nvme_path, GB/s (0: measured when the job offloads to NVMe).
  double nvme_read_gbps = 0, nvme_write_gbps = 0;
  bool json = false;
  int top = 10;
};

// The threads per rank the job runs with on a node of `slots` slots here: device.threads, else
// the cores shared out (what the agent gives OMP_NUM_THREADS).
int AutoThreads(int device_threads, int slots);

StatusOr<std::string> RunAutoPlan(const AutoRequest& request);

// `parallel: auto`: the fastest layout that fits `job` on the request's nodes (its `job` path
// only names the file in messages). The job's own micro-batch, accumulation and recompute, where
// given, are kept.
struct AutoChoice {
  Layout layout;
  AutoResult result;
  std::string rates_path;
  std::string rates_note;  // the CPU and threads the rates were measured with
  // The NVMe rates the swaps were timed at (0: the job swaps nothing): what a later choice for
  // the same job passes back (AutoRequest::nvme_*) instead of measuring again.
  double nvme_read_gbps = 0, nvme_write_gbps = 0;
};
StatusOr<AutoChoice> ChooseLayout(const config::JobConfig& job, const AutoRequest& where);

// What ds-launch hands every worker (DS_LAYOUT) and what it applies:
// "tensor=2 pipeline=1 stage=1 micro=2 gas=2 recompute=none ulysses=1 expert=1 schedule=1f1b
// virtual=1 hpz=1" (hpz 1: the job's own zero_hpz_partition_size).
std::string LayoutSpec(const Layout& layout);
// InvalidArgument naming the part it cannot read; the job's parallel.auto_layout is cleared.
Status ApplyLayoutSpec(const std::string& spec, config::JobConfig* job);

// The prediction the workers compare their first steps with (DS_LAYOUT_PREDICTION):
// "step=909.9 FORWARD=300.1 BACKWARD=..." (ms, the slowest rank's), and back.
std::string PredictionSpec(const StepPrediction& p);
std::map<std::string, double> ParsePredictionSpec(const std::string& spec);

// "12.5" (GB/s a rank sends at) or "12.5@20" (and 20 us of latency; 50 us when not given) ->
// LinkRate; InvalidArgument naming `what` otherwise.
StatusOr<LinkRate> ParseLinkRate(const std::string& text, const std::string& what);

// "2,2" -> {2, 2}; InvalidArgument naming `what` for anything but positive integers.
StatusOr<std::vector<int>> ParseIntList(const std::string& text, const std::string& what);

}  // namespace ds::planner
