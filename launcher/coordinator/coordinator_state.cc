// CoordinatorState, part 1: configuration, the agents' calls that drive the job (Join,
// Heartbeat, ReportExit) and the job state machine. Part 2 (coordinator_state_query.cc):
// progress, logs, KV store, Stop, snapshots and the blocking waits.
//
// Note [Failures]
// A failure is a worker exit that is not 0 (or a signal), a member node silent for
// node_timeout (LOST), a join deadline passed below min_nodes, or ranks still running
// success_wait after a node finished with all ranks at 0. Only the first failure of a
// running round acts (later ones are its consequences: the peers of a dead rank fail in
// their collectives, stopped workers exit by signal); it becomes first_failure, the root
// cause shown by ds-launch status, unless a rank whose exit the agents saw earlier is
// reported later (EarlierRootCauseLocked). With restarts left (counted per job, not per agent) the
// job goes RESTARTING: round r+1 opens, every agent heartbeating with round r is answered
// STOP_WORKERS, stops its workers and joins r+1; exits reported for round r are then
// recorded as STOPPED. The join timeout and the success wait end the job without a
// restart: the first means nodes are missing, the second that some ranks are done.
#include "launcher/coordinator/coordinator_state.h"

#include <algorithm>
#include <set>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {

StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Create(CoordinatorConfig config,
                                                                     const Clock* clock) {
  const int n = static_cast<int>(config.nodes.size());
  if (n == 0) return InvalidArgumentError("coordinator: no nodes (empty hostfile)");
  std::set<std::string> names;
  for (const NodeSpec& node : config.nodes) {
    if (node.name.empty()) return InvalidArgumentError("coordinator: a node without a name");
    if (!names.insert(node.name).second) {
      return InvalidArgumentError("coordinator: node " + node.name + " listed twice");
    }
    if (node.slots < 0) {
      return InvalidArgumentError("coordinator: node " + node.name + " has negative slots");
    }
  }
  if (config.max_nodes == 0) config.max_nodes = n;
  if (config.min_nodes == 0) config.min_nodes = config.max_nodes;
  if (config.max_nodes < 1 || config.max_nodes > n) {
    return InvalidArgumentError("coordinator: max_nodes " + std::to_string(config.max_nodes) +
                                " is outside 1.." + std::to_string(n) + " (hostfile nodes)");
  }
  if (config.min_nodes < 1 || config.min_nodes > config.max_nodes) {
    return InvalidArgumentError("coordinator: min_nodes " + std::to_string(config.min_nodes) +
                                " is outside 1.." + std::to_string(config.max_nodes));
  }
  using std::chrono::milliseconds;
  if (config.join_timeout <= milliseconds(0) || config.last_call < milliseconds(0) ||
      config.heartbeat_interval <= milliseconds(0) || config.success_wait <= milliseconds(0) ||
      config.node_timeout < milliseconds(0) || config.max_restarts < 0) {
    return InvalidArgumentError(
        "coordinator: join_timeout, heartbeat_interval and success_wait must be positive; "
        "last_call, node_timeout and max_restarts not negative");
  }
  if (config.node_timeout == milliseconds(0)) config.node_timeout = 3 * config.heartbeat_interval;
  config.job.heartbeat_interval_ms = static_cast<int>(config.heartbeat_interval.count());
  return std::unique_ptr<CoordinatorState>(
      new CoordinatorState(std::move(config), clock ? clock : SteadyClock()));
}

CoordinatorState::CoordinatorState(CoordinatorConfig config, const Clock* clock)
    : config_(std::move(config)),
      clock_(clock),
      started_at_(clock->Now()),
      rendezvous_(RendezvousConfig{config_.nodes, config_.min_nodes, config_.max_nodes,
                                   config_.join_timeout, config_.last_call}),
      nodes_(config_.nodes.size()),
      kv_(config_.kv_max_bytes),
      logs_(config_.log_capacity_lines) {
  rendezvous_.Open(1, started_at_);
  kv_.SetRound(1);
  job_pending_ = config_.job_pending;
}

CoordinatorState::~CoordinatorState() = default;

StatusOr<int> CoordinatorState::NodeIndexLocked(const std::string& name) const {
  int index = rendezvous_.NodeIndex(name);
  if (index < 0) return NotFoundError("node '" + name + "' is not in the hostfile");
  return index;
}

void CoordinatorState::ChangedLocked() {
  ++version_;
  change_cv_.notify_all();
}

StatusOr<JoinResult> CoordinatorState::Join(const JoinRequest& request, const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int index, NodeIndexLocked(request.node_name));
  DS_RETURN_IF_ERROR(EndedErrorLocked());
  SteadyTime now = clock_->Now();
  EvaluateLocked(now);  // a window may have passed since the last Tick
  DS_RETURN_IF_ERROR(EndedErrorLocked());
  while (job_pending_) {  // the launcher is still measuring the links (SetJob)
    DS_RETURN_IF_ERROR(EndedErrorLocked());
    DS_RETURN_IF_ERROR(WaitSliceLocked(lock, round_cv_, wait, SteadyTime::max())
                           .WithPrefix("waiting for the launcher to choose the layout"));
  }
  if (request.round == 0 && WaitsForAdmissionLocked(index)) {  // coordinator_state_rounds.cc
    DS_RETURN_IF_ERROR(AwaitAdmissionLocked(lock, index, wait));
    now = clock_->Now();
  }
  DS_ASSIGN_OR_RETURN(const uint64_t ticket, rendezvous_.Join(index, request, now));
  const int round = rendezvous_.round();
  NodeRecord& node = nodes_[index];
  node.advertise_addr = request.advertise_addr.empty() ? request.node_name : request.advertise_addr;
  node.state = AgentState::kJoining;
  node.agent_pid = request.agent_pid;
  node.last_heartbeat = now;
  if (phase_ == JobPhase::kPending) phase_ = JobPhase::kRendezvous;
  DS_LOG_INFO("coord", "round {}: node {} joined ({})", round, request.node_name,
              node.advertise_addr);
  ChangedLocked();
  EvaluateLocked(now);
  for (;;) {
    if (node.result_round == round) return node.result;
    if (closed_) return UnavailableError("the coordinator is shutting down");
    if (rendezvous_.round() == round && !rendezvous_.error().ok()) return rendezvous_.error();
    if (IsTerminal(phase_)) return AbortedError("the job ended: " + end_message_);
    if (rendezvous_.round() != round) {
      return AbortedError("rendezvous round " + std::to_string(round) +
                          " was superseded by round " + std::to_string(rendezvous_.round()));
    }
    Status s =
        WaitSliceLocked(lock, round_cv_, wait, rendezvous_.opened_at() + config_.join_timeout);
    if (!s.ok()) {
      rendezvous_.Leave(index, ticket, clock_->Now());
      if (!rendezvous_.HasJoined(index)) node.state = AgentState::kUnknown;
      ChangedLocked();
      return s.WithPrefix("waiting for rendezvous round " + std::to_string(round) + " (" +
                          rendezvous_.Describe() + ")");
    }
    EvaluateLocked(clock_->Now());
  }
}

void CoordinatorState::EvaluateLocked(SteadyTime now) {
  if (IsTerminal(phase_) || job_pending_) return;  // SetJob opens the window anew
  if (phase_ == JobPhase::kRestarting) CheckAwaitedLocked(now);
  if (rendezvous_.Evaluate(now)) {
    if (rendezvous_.closed()) {
      OnRoundClosedLocked();
    } else {
      Failure failure;
      failure.cause = rendezvous_.error().message();
      failure.time_ms = NowUnixMs();
      first_failure_ = failure;
      EndJobLocked(JobPhase::kFailed, failure.cause);
    }
    round_cv_.notify_all();
  }
  if (phase_ == JobPhase::kRunning) CheckNodesLocked(now);
  if (phase_ == JobPhase::kRunning) CheckSuccessWaitLocked(now);
  if (phase_ == JobPhase::kRunning) CheckHangLocked(now);
}

void CoordinatorState::OnRoundClosedLocked() {
  const int round = rendezvous_.round();
  const int world = rendezvous_.world_size();
  ranks_.assign(world, RankStatus{});
  rank_node_.assign(world, -1);
  ranks_round_ = round;
  for (NodeRecord& node : nodes_) {
    node.node_rank = -1;
    node.ranks.clear();
    if (node.state != AgentState::kLost) node.state = AgentState::kUnknown;
  }
  JobSpec job = config_.job;
  job.resume = job.resume || round > 1;
  for (const RoundMember& m : rendezvous_.members()) {
    NodeRecord& node = nodes_[m.node_index];
    node.state = AgentState::kRunning;
    node.node_rank = m.node_rank;
    node.shutdown_delivered = false;
    for (int local = 0; local < m.slots; ++local) {
      const int rank = m.first_rank + local;
      ranks_[rank].rank = rank;
      ranks_[rank].host = config_.nodes[m.node_index].name;
      ranks_[rank].phase = WorkerPhase::kStarting;
      rank_node_[rank] = m.node_index;
      node.ranks.push_back(rank);
    }
    node.result = JoinResult{round,
                             m.node_rank,
                             static_cast<int>(rendezvous_.members().size()),
                             world,
                             node.ranks,
                             job,
                             node.advertise_addr};
    node.result_round = round;
  }
  AssignCopiesLocked(round, world);
  phase_ = JobPhase::kRunning;
  round_failed_ = false;
  first_done_at_.reset();
  hang_ = config_.hang.enabled ? std::make_unique<HangWatch>(config_.hang, world) : nullptr;
  hang_report_.reset();
  if (hang_)
    DS_LOG_INFO("coord", "round {}: hang deadline {}", round, DescribeHangOptions(config_.hang));
  ChangedLocked();
}

void CoordinatorState::CheckNodesLocked(SteadyTime now) {
  std::vector<Failure> lost;
  for (const RoundMember& m : rendezvous_.members()) {
    NodeRecord& node = nodes_[m.node_index];
    if (node.state != AgentState::kRunning) continue;
    SteadyTime last = std::max(node.last_heartbeat.value_or(SteadyTime()), rendezvous_.closed_at());
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last);
    if (silent <= config_.node_timeout) continue;
    node.state = AgentState::kLost;
    rendezvous_.MarkLost(m.node_index);
    Failure failure;
    failure.host = config_.nodes[m.node_index].name;
    failure.cause = "node lost: no heartbeat for " + FormatSeconds(silent);
    failure.time_ms = NowUnixMs();
    lost.push_back(failure);
  }
  // OnFailureLocked may open the next round, which clears members(): act after the loop.
  for (const Failure& failure : lost) OnFailureLocked(failure);
  if (!lost.empty()) ChangedLocked();
}

void CoordinatorState::CheckSuccessWaitLocked(SteadyTime now) {
  if (!first_done_at_ || now - *first_done_at_ < config_.success_wait) return;
  std::string hosts, detail;
  for (const RoundMember& m : rendezvous_.members()) {
    std::string running;
    for (int rank : nodes_[m.node_index].ranks) {
      if (ranks_[rank].phase == WorkerPhase::kSucceeded) continue;
      running += (running.empty() ? "" : ", ") + std::to_string(rank);
    }
    if (running.empty()) continue;
    const std::string& name = config_.nodes[m.node_index].name;
    hosts += (hosts.empty() ? "" : ",") + name;
    detail += (detail.empty() ? "" : "; ") + name + " (ranks " + running + ")";
  }
  Failure failure;
  failure.host = hosts;
  failure.cause = "still running " + FormatSeconds(config_.success_wait) + " after " +
                  first_done_node_ + " finished: " + detail;
  failure.time_ms = NowUnixMs();
  round_failed_ = true;
  first_failure_ = failure;
  EndJobLocked(JobPhase::kFailed, failure.cause);
}

// Which rank failed first is a race between the agents' reports: a killed rank's peers fail in
// their collectives at once, and their agent may report before the killed rank's does. So a
// rank's failure that exited before the recorded one (the agents' exit times) becomes the root
// cause instead, whenever it is reported; what the job does about the failure stays as it was.
bool CoordinatorState::EarlierRootCauseLocked(const Failure& failure) {
  if (!round_failed_ || !first_failure_ || first_failure_->rank < 0 ||
      failure.time_ms >= first_failure_->time_ms)
    return false;
  DS_LOG_INFO("coord", "rank {} on {} exited ({}) {} ms before rank {}: it is the first failure",
              failure.rank, failure.host, failure.cause, first_failure_->time_ms - failure.time_ms,
              first_failure_->rank);
  if (phase_ == JobPhase::kFailed && end_message_ == FailureText(*first_failure_))
    end_message_ = FailureText(failure);
  first_failure_ = failure;
  return true;
}

std::string CoordinatorState::FailureText(const Failure& failure) {
  const std::string where = failure.rank >= 0
                                ? "rank " + std::to_string(failure.rank) + " on " + failure.host
                                : "node " + failure.host;
  return where + ": " + failure.cause;
}

void CoordinatorState::OnFailureLocked(Failure failure) {
  if (phase_ != JobPhase::kRunning || round_failed_) return;  // See Note [Failures]
  round_failed_ = true;
  const std::string what = FailureText(failure);
  first_failure_ = std::move(failure);
  if (restarts_ < config_.max_restarts) {
    ++restarts_;
    DS_LOG_WARN("coord", "round {} failed ({}); restart {} of {}: stopping all workers, round {}",
                rendezvous_.round(), what, restarts_, config_.max_restarts,
                rendezvous_.round() + 1);
    OpenNextRoundLocked();
    return;
  }
  EndJobLocked(JobPhase::kFailed, what);
}

void CoordinatorState::EndJobLocked(JobPhase phase, const std::string& message) {
  phase_ = phase;
  end_message_ = message;
  if (phase == JobPhase::kSucceeded) {
    DS_LOG_INFO("coord", "job succeeded: {}", message);
  } else if (phase == JobPhase::kStopped) {
    DS_LOG_WARN("coord", "job {}", message);  // "stopped: <reason>"
  } else {
    DS_LOG_ERROR("coord", "job failed: {}", message);
  }
  ChangedLocked();
  round_cv_.notify_all();
  kv_cv_.notify_all();
  log_cv_.notify_all();
}

void CoordinatorState::MarkRankSucceededLocked(int rank) {
  ranks_[rank].phase = WorkerPhase::kSucceeded;
  const int index = rank_node_[rank];
  NodeRecord& node = nodes_[index];
  for (int r : node.ranks) {
    if (ranks_[r].phase != WorkerPhase::kSucceeded) return;
  }
  node.state = AgentState::kDone;
  if (!first_done_at_) {
    first_done_at_ = clock_->Now();
    first_done_node_ = config_.nodes[index].name;
  }
  for (const RankStatus& r : ranks_) {
    if (r.phase != WorkerPhase::kSucceeded) return;
  }
  EndJobLocked(JobPhase::kSucceeded, "all " + std::to_string(ranks_.size()) + " ranks exited 0");
}

AgentCommand CoordinatorState::CommandForLocked(int node_index, int round) const {
  if (IsTerminal(phase_)) return AgentCommand::kShutdown;
  if (round == 0 || round >= rendezvous_.round()) return AgentCommand::kContinue;
  // The agent runs an older round: stop it, unless a newer round closed without it.
  if (rendezvous_.closed() && rendezvous_.FindMember(node_index) == nullptr) {
    return AgentCommand::kShutdown;
  }
  return AgentCommand::kStopWorkers;
}

StatusOr<HeartbeatReply> CoordinatorState::Heartbeat(const HeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int index, NodeIndexLocked(request.node_name));
  if (closed_) return UnavailableError("the coordinator is shutting down");
  if (request.round > rendezvous_.round()) {
    return FailedPreconditionError("heartbeat for round " + std::to_string(request.round) +
                                   ", which does not exist; the current round is " +
                                   std::to_string(rendezvous_.round()));
  }
  NodeRecord& node = nodes_[index];
  node.last_heartbeat = clock_->Now();
  bool changed = false;
  if (request.round != 0 && request.round == ranks_round_) {
    for (const WorkerReport& w : request.workers) {
      if (w.rank < 0 || w.rank >= static_cast<int>(ranks_.size()) || rank_node_[w.rank] != index) {
        continue;
      }
      RankStatus& r = ranks_[w.rank];
      if (w.pid != 0 && r.pid != w.pid) {
        r.pid = w.pid;
        changed = true;
      }
      const bool ended = r.phase == WorkerPhase::kSucceeded || r.phase == WorkerPhase::kFailed ||
                         r.phase == WorkerPhase::kStopped;
      const bool live = w.phase == WorkerPhase::kStarting || w.phase == WorkerPhase::kRunning;
      if (!ended && live && r.phase != w.phase) {
        r.phase = w.phase;
        changed = true;
      }
    }
  }
  HeartbeatReply reply{rendezvous_.round(), CommandForLocked(index, request.round)};
  if (reply.command == AgentCommand::kContinue && request.round == ranks_round_) {
    reply.dump_ranks = DumpRanksForLocked(index);  // an open hang report's stacks
    if (!reply.dump_ranks.empty()) reply.command = AgentCommand::kDumpStacks;
  }
  if (reply.command == AgentCommand::kShutdown && !node.shutdown_delivered) {
    node.shutdown_delivered = true;
    change_cv_.notify_all();
  }
  if (changed) ChangedLocked();
  return reply;
}

Status CoordinatorState::ReportExit(const ExitReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int index, NodeIndexLocked(report.node_name));
  if (report.round == 0 || report.round != ranks_round_) {
    DS_LOG_DEBUG("coord", "ignoring exit of rank {} from round {} (ranks of round {})", report.rank,
                 report.round, ranks_round_);
    return OkStatus();
  }
  if (report.rank < 0 || report.rank >= static_cast<int>(ranks_.size()) ||
      rank_node_[report.rank] != index) {
    return InvalidArgumentError("rank " + std::to_string(report.rank) + " does not run on " +
                                report.node_name + " in round " + std::to_string(report.round));
  }
  RankStatus& r = ranks_[report.rank];
  if (report.pid != 0) r.pid = report.pid;
  r.signaled = report.signaled;
  r.exit_code = report.code;
  const bool success = !report.signaled && report.code == 0;
  const bool live = phase_ == JobPhase::kRunning && report.round == rendezvous_.round();
  Failure failure{report.rank, report.node_name, ExitCause(report.signaled, report.code),
                  report.last_lines, report.exit_ms > 0 ? report.exit_ms : NowUnixMs()};
  if (success && live) {
    MarkRankSucceededLocked(report.rank);
  } else if (success) {
    r.phase = WorkerPhase::kSucceeded;
  } else if (EarlierRootCauseLocked(failure)) {
    r.phase = WorkerPhase::kFailed;
  } else if (!live) {
    r.phase = WorkerPhase::kStopped;  // stopped by us: a restart, Stop, or an ended job
  } else {
    r.phase = WorkerPhase::kFailed;
    OnFailureLocked(std::move(failure));
  }
  ChangedLocked();
  return OkStatus();
}

}  // namespace ds::launcher
