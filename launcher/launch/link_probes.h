// `parallel: auto` across nodes measures the job's own links at launch, through its agents,
// before it chooses the layout: each agent probes its own store server (the link between ranks
// of one node: loopback on that node) and then the next node's (launcher/agent/agent_probes.h;
// the wire: launcher/state_store/link_probe.h), a ping median and a timed sink each, a few
// hundred milliseconds in all. The cost model then takes, per class, the slower of the host's
// table and the measured rate (planner::Slower): inside a node the nodes' median, between
// nodes the ring's slowest link (a ring collective runs at its slowest link's pace) shared by a
// node's ranks, which send across at once in every layout the planner makes.
//
//   DS_ASSIGN_OR_RETURN(MeasuredLinks m, MeasureLinks(&state, nodes, std::chrono::seconds(120)));
//   std::fputs(FormatMeasuredLinks(m).c_str(), stderr);
//   request.intra_link = m.intra_rate; request.inter_link = m.inter_rate;
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_state.h"
#include "launcher/hostfile.h"
#include "launcher/state_store/link_probe.h"
#include "runtime/base/status.h"
#include "runtime/planner/host_rates.h"

namespace ds::launcher {

struct MeasuredLinks {
  std::vector<std::string> nodes;        // node order
  std::vector<LinkSample> intra, inter;  // per node; inter: to the next node (none with one node)
  planner::LinkRate intra_rate;          // the nodes' median latency and bandwidth
  planner::LinkRate inter_rate;          // the largest latency; the smallest bandwidth, shared
  int ranks_per_link = 1;                // by this many ranks of a node (the most slots)
};

// Waits (each wait up to `timeout`, and until `cancelled` says so: a signal to ds-launch) for
// every node's agent to say where it answers probes, hands them the ring, then waits for their
// samples. Errors name the node and its agent's reason, or the keys still missing at the timeout.
StatusOr<MeasuredLinks> MeasureLinks(CoordinatorState* state, const std::vector<NodeSpec>& nodes,
                                     std::chrono::milliseconds timeout,
                                     std::function<bool()> cancelled = nullptr);

// The table ds-launch prints: each node's two samples, then the rates the cost model takes.
std::string FormatMeasuredLinks(const MeasuredLinks& m);

}  // namespace ds::launcher
