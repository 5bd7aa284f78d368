// CoordinatorState's round transitions: the next round opened (a restart after a failure, or a
// rescale that admits a node), the last round's live members awaited in it, and admission.
//
// A node of the hostfile that asks to join a running elastic job (--nnodes MIN:MAX) with fewer
// members than max_nodes is admitted at a round boundary:
//  - with in-memory copies (fault_tolerance.in_memory_interval), at once: round r+1 opens (a
//    rescale, not counted against --max_restarts), the running agents are answered STOP_WORKERS
//    and join it, and every rank of the larger world cuts its part out of the newest complete
//    copies (memory_copies.h), so the job gives back at most the interval's steps;
//  - without them, at the next round a failure opens: restarting now would send every rank back
//    to the disk checkpoint (or step 0) and lose the steps since, so the node waits.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_state.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {

Status CoordinatorState::SetJob(JobSpec job, std::vector<int> hang_streams) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(EndedErrorLocked());
  if (!job_pending_) return FailedPreconditionError("SetJob: the job was given already");
  job.heartbeat_interval_ms = static_cast<int>(config_.heartbeat_interval.count());
  config_.job = std::move(job);
  config_.hang.streams = std::move(hang_streams);
  job_pending_ = false;
  rendezvous_.Open(1, clock_->Now());  // nobody joined yet: the join window starts now
  DS_LOG_INFO("coord", "the job is set: {} argument(s), {} environment variable(s)",
              config_.job.worker_argv.size(), config_.job.env.size());
  ChangedLocked();
  round_cv_.notify_all();
  return OkStatus();
}

void CoordinatorState::OpenNextRoundLocked() {
  std::vector<int> alive;  // the running round's members that are not lost: awaited in the next
  for (const RoundMember& m : rendezvous_.members())
    if (nodes_[m.node_index].state != AgentState::kLost) alive.push_back(m.node_index);
  const int next = rendezvous_.round() + 1;
  phase_ = JobPhase::kRestarting;
  rendezvous_.Open(next, clock_->Now());
  for (int index : alive) rendezvous_.Expect(index);
  kv_.SetRound(next);
  kv_cv_.notify_all();
  round_cv_.notify_all();
  ChangedLocked();
}

// A node the open round awaits (a member of the last one) that went silent for node_timeout is
// lost: the round no longer waits for it.
void CoordinatorState::CheckAwaitedLocked(SteadyTime now) {
  for (int index : rendezvous_.Awaited()) {
    NodeRecord& node = nodes_[index];
    SteadyTime last = std::max(node.last_heartbeat.value_or(SteadyTime()), rendezvous_.opened_at());
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last);
    if (silent <= config_.node_timeout) continue;
    node.state = AgentState::kLost;
    rendezvous_.MarkLost(index);
    DS_LOG_WARN("coord", "round {}: node {} is lost (no heartbeat for {}): not waited for",
                rendezvous_.round(), config_.nodes[index].name, FormatSeconds(silent));
    ChangedLocked();
  }
}

bool CoordinatorState::WaitsForAdmissionLocked(int node_index) const {
  return phase_ == JobPhase::kRunning && rendezvous_.closed() &&
         rendezvous_.FindMember(node_index) == nullptr &&
         static_cast<int>(rendezvous_.members().size()) < config_.max_nodes;
}

Status CoordinatorState::AwaitAdmissionLocked(std::unique_lock<std::mutex>& lock, int node_index,
                                              const WaitOptions& wait) {
  const std::string& name = config_.nodes[node_index].name;
  const int round = rendezvous_.round();
  const std::string members = std::to_string(rendezvous_.members().size()) + " of at most " +
                              std::to_string(config_.max_nodes) + " nodes";
  if (config_.memory_copies) {
    const int next = round + 1;
    DS_LOG_WARN("coord",
                "node {} asks to join round {} ({}): admitted now; round {} opens, the running "
                "workers stop and every rank resumes from the newest in-memory copies (not a "
                "restart)",
                name, round, members, next);
    OpenNextRoundLocked();  // the exits of the workers it stops are not failures
    return OkStatus();
  }
  DS_LOG_WARN("coord",
              "node {} asks to join round {} ({}): admitted at the next round (a restart now "
              "would go back to the disk checkpoint; fault_tolerance.in_memory_interval makes "
              "admission immediate)",
              name, round, members);
  nodes_[node_index].state = AgentState::kJoining;
  ChangedLocked();
  while (rendezvous_.round() == round) {
    if (closed_) return UnavailableError("the coordinator is shutting down");
    DS_RETURN_IF_ERROR(EndedErrorLocked());
    DS_RETURN_IF_ERROR(WaitSliceLocked(lock, round_cv_, wait, SteadyTime::max())
                           .WithPrefix("node " + name + " waiting for the next round"));
  }
  return OkStatus();
}

}  // namespace ds::launcher
