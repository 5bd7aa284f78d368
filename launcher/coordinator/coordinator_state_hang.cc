// CoordinatorState's hang diagnosis: the ranks' plan positions (ReportProgress) feed a
// HangWatch; when no rank moved for its deadline the state writes one report naming the ranks
// furthest behind and where the others wait, asks those ranks' agents for their thread stacks
// (the heartbeat's DUMP_STACKS), and ends the round as a failure, stacks attached, once they are
// in or stack_wait passed: the job fails, or restarts under max_restarts, as for a crash.
#include <algorithm>
#include <sstream>

#include "launcher/coordinator/coordinator_state.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

constexpr size_t kStackLinesPerRank = 200;

// The report's lines for the Failure: each rank's stacks, at most kStackLinesPerRank lines.
std::vector<std::string> StackLines(const std::vector<int>& ranks,
                                    const std::map<int, std::string>& stacks) {
  std::vector<std::string> lines;
  for (int rank : ranks) {
    auto it = stacks.find(rank);
    if (it == stacks.end()) {
      lines.push_back("rank " + std::to_string(rank) + ": no stacks came from its agent in time");
      continue;
    }
    lines.push_back("rank " + std::to_string(rank) + " threads:");
    std::istringstream in(it->second);
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
      if (++n > kStackLinesPerRank) {
        lines.push_back("  ... (" + std::to_string(kStackLinesPerRank) + " lines shown)");
        break;
      }
      lines.push_back("  " + line);
    }
  }
  return lines;
}

}  // namespace

void CoordinatorState::CheckHangLocked(SteadyTime now) {
  if (!hang_) return;
  if (!hang_report_) {
    if (!hang_->Hung(now)) return;
    std::vector<std::string> hosts;
    for (const RankStatus& r : ranks_) hosts.push_back(r.host);
    HangReport report;
    report.diagnosis = hang_->Diagnose(now, hosts);
    report.ranks = hang_->StuckRanks(now);
    if (report.ranks.size() > 4) report.ranks.resize(4);  // every rank stands still: a few suffice
    report.at = now;
    DS_LOG_ERROR("coord", "{}; asking for the stacks of rank{} {}", report.diagnosis,
                 report.ranks.size() == 1 ? "" : "s", [&] {
                   std::string s;
                   for (int r : report.ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
                   return s;
                 }());
    hang_report_ = std::move(report);
    ChangedLocked();
    return;
  }
  // Waiting on: the ranks whose stacks have not come, unless their agent went silent too (a cut
  // network: it never hears DUMP_STACKS).
  bool waiting = false;
  for (int rank : hang_report_->ranks) {
    if (hang_report_->stacks.count(rank)) continue;
    const NodeRecord& node = nodes_[rank_node_[rank]];
    const bool silent =
        !node.last_heartbeat || now - *node.last_heartbeat > 3 * config_.heartbeat_interval;
    waiting = waiting || !silent;
  }
  if (!waiting || now - hang_report_->at >= config_.stack_wait) EndHangLocked();
}

void CoordinatorState::EndHangLocked() {
  HangReport report = std::move(*hang_report_);
  hang_report_.reset();
  hang_.reset();  // one report per round
  Failure failure;
  failure.rank = report.ranks.empty() ? -1 : report.ranks[0];
  failure.host = failure.rank >= 0 ? ranks_[failure.rank].host : "";
  failure.cause = report.diagnosis;
  failure.last_lines = StackLines(report.ranks, report.stacks);
  failure.time_ms = NowUnixMs();
  OnFailureLocked(std::move(failure));
  ChangedLocked();
}

std::vector<int> CoordinatorState::DumpRanksForLocked(int node_index) {
  std::vector<int> ranks;
  if (!hang_report_) return ranks;
  for (int rank : hang_report_->ranks) {
    if (rank_node_[rank] != node_index) continue;
    std::vector<int>& asked = hang_report_->asked;
    if (std::find(asked.begin(), asked.end(), rank) != asked.end()) continue;
    asked.push_back(rank);
    ranks.push_back(rank);
  }
  return ranks;
}

Status CoordinatorState::ReportStacks(const StackReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int index, NodeIndexLocked(report.node_name));
  if (!hang_report_ || report.round != ranks_round_) return OkStatus();  // late: nothing waits
  if (report.rank < 0 || report.rank >= static_cast<int>(ranks_.size()) ||
      rank_node_[report.rank] != index)
    return InvalidArgumentError("stacks of rank " + std::to_string(report.rank) +
                                ", which does not run on " + report.node_name);
  hang_report_->stacks[report.rank] = report.text;
  CheckHangLocked(clock_->Now());
  return OkStatus();
}

}  // namespace ds::launcher
