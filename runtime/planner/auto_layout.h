// `parallel: auto` and `ds-launch plan --auto`: every layout of a job over the given nodes that
// the planner can make and that fits each rank's memory, ranked by the cost model's predicted
// step time (step_sim.h). The grid: tensor x pipeline x data sizes of the world (tensor groups
// inside a node, as ds-launch places them; at most one pipeline stage per block), ZeRO
// stages 0-3, every micro-batch and accumulation count that makes train_batch_size, and
// activation recompute, with offload_optimizer device auto the optimizer states (and at stage 3
// the parameters) swapped to NVMe, and for ZeRO-3 across nodes of as many ranks each ZeRO++'s hpZ
// over a node's dp ranks (exact: the same numbers, backward's gathers inside the node; qwZ and qgZ
// change the numbers, so they stay as the job gives them). Pruned, not enumerated blindly:
// recompute and offload are tried only for a layout that does not fit without them (they only
// add work; each offload level with the least recompute that fits), and
// a layout the planner refuses is dropped with its reason.
//
//   DS_ASSIGN_OR_RETURN(AutoResult r, SearchLayouts(graph, config, {slots, memory, rates}));
//   r.layouts[0] is the fastest that fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"
#include "runtime/planner/host_rates.h"
#include "runtime/planner/step_sim.h"

namespace ds::planner {

// The optimizer's sub-group (elements) of a layout the search offloads, where the job's is
// larger: DeepSpeed's default (1e9) makes one sub-group of a whole shard, whose swap buffers
// (buffer_count of them) would hold more than the states they swap.
inline constexpr int64_t kAutoSubGroupSize = int64_t{1} << 20;

struct AutoOptions {
  std::vector<int> node_slots;       // ranks per node, in hostfile order
  std::vector<int> host_of_node;     // the machine each node is (empty: each its own)
  int64_t host_memory_per_node = 0;  // bytes per machine; each rank gets its machine's share
  HostRates rates;
  int64_t micro = 0, gas = 0;    // the job's own (0: searched)
  bool recompute_given = false;  // keep the job's recompute mode (else none, or full where a
                                 // layout does not fit without it)
  bool schedule_given = false;   // keep the job's pipeline schedule (else 1f1b, zb-h1 and
                                 // interleaved with 2 virtual stages are searched)
  // offload_optimizer (and offload_param) device auto: a layout that does not fit may swap its
  // optimizer states (1), and at stage 3 its parameters too (2), to the job's nvme_path, at the
  // I/O rates measured there (HostRates::nvme_*). 0: the job's own offload only.
  int offload_max = 0;
};

struct Layout {
  int tp = 1, pp = 1, dp = 1, stage = 0;
  int64_t micro = 1, gas = 1;
  RecomputeMode recompute = RecomputeMode::kNone;
  int sp = 1;  // Ulysses' sequence-parallel size (divides dp; the batch splits over dp / sp)
  int ep = 1;  // expert-parallel size (divides dp; MoE models only)
  plan::PipeScheduleKind schedule = plan::PipeScheduleKind::k1F1B;  // pp > 1
  int virtual_stages = 1;                                           // interleaved's
  int hpz = 1;               // ZeRO++'s hpZ partition size (stage 3; 1: none, or the job's own)
  int offload = 0;           // to NVMe: 1 the optimizer states, 2 and the parameters (stage 3)
  int64_t peak_bytes = 0;    // the largest rank's planned peak
  int64_t budget_bytes = 0;  // what that rank's node gives it
  StepPrediction prediction;
  double tokens_per_s = 0;
  // "tp 2 pp 1 dp 2 zero 1 micro 4 x gas 2 recompute none", then "ulysses N" and "ep N" where
  // above 1, with a pipeline "schedule zb-h1" (interleaved: "schedule interleaved x2"), and
  // "hpz N" where the search set hpZ, "offload nvme" (optimizer) or "offload nvme+params".
  std::string Name() const;
  // The job's config with this layout applied.
  plan::PlanConfig Apply(const plan::PlanConfig& base) const;
};

struct AutoResult {
  std::vector<Layout> layouts;  // those that fit, fastest first
  int planned = 0;              // candidates planned
  int refused = 0;              // the planner refused them (reasons: first few in `refusals`)
  int too_big = 0;              // planned but over the memory budget
  std::vector<std::string> refusals;
  Layout closest;  // when nothing fits: the smallest peak over its budget
  double search_ms = 0;
};

StatusOr<AutoResult> SearchLayouts(const Graph& graph, const plan::PlanConfig& base,
                                   const AutoOptions& options);

// Why the first layout beats the second: its predicted time by part (compute, the
// communication no compute hid) and the instruction kind that differs most.
std::string ExplainLead(const Layout& best, const Layout& next);

// The ranked table, the top `top` rows, with the why line and the search's counts.
std::string FormatAutoResult(const AutoResult& r, int top);
// The same as {"layouts": [...]} (best first), with the counts.
std::string AutoResultJson(const AutoResult& r, int top);

}  // namespace ds::planner
