// CoordinatorState, part 2: progress and logs, the KV store, Stop, snapshots, the blocking
// waits, Tick and Close. Part 1 (coordinator_state.cc) has Join, Heartbeat, ReportExit and
// the job state machine.
#include <algorithm>

#include "launcher/coordinator/coordinator_state.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

// How often a blocked call re-checks its caller's cancellation.
constexpr std::chrono::milliseconds kPollSlice(100);

std::string JoinKeys(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

Status CoordinatorState::WaitSliceLocked(std::unique_lock<std::mutex>& lock,
                                         std::condition_variable& cv, const WaitOptions& wait,
                                         SteadyTime protocol_deadline) {
  const SteadyTime real_now = std::chrono::steady_clock::now();
  if (real_now >= wait.deadline) return DeadlineExceededError("the caller's deadline passed");
  if (wait.cancelled && wait.cancelled()) return CancelledError("the caller cancelled");
  if (closed_) return UnavailableError("the coordinator is shutting down");
  const SteadyTime wake =
      std::min({wait.deadline, real_now + kPollSlice, clock_->WakeTimeFor(protocol_deadline)});
  cv.wait_until(lock, wake);
  return OkStatus();
}

Status CoordinatorState::EndedErrorLocked() const {
  if (closed_) return UnavailableError("the coordinator is shutting down");
  if (!IsTerminal(phase_)) return OkStatus();
  return FailedPreconditionError("the job is " + std::string(JobPhaseName(phase_)) + " (" +
                                 end_message_ + "); the current round is " +
                                 std::to_string(rendezvous_.round()));
}

// ---- progress and logs ----

Status CoordinatorState::ReportProgress(const ProgressReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  const int round = report.round == 0 ? ranks_round_ : report.round;
  if (round == 0 || round != ranks_round_) return OkStatus();  // a stale worker
  if (report.rank < 0 || report.rank >= static_cast<int>(ranks_.size())) {
    return InvalidArgumentError("progress of rank " + std::to_string(report.rank) +
                                "; the world size of round " + std::to_string(round) + " is " +
                                std::to_string(ranks_.size()));
  }
  RankStatus& r = ranks_[report.rank];
  r.step = report.step;
  r.total_steps = report.total_steps;
  r.loss = report.loss;
  r.tokens_per_s = report.tokens_per_s;
  r.rss_bytes = report.rss_bytes;
  if (report.position && hang_) {
    const bool measured = hang_->measured();
    hang_->Report(report.rank, *report.position, report.step, clock_->Now());
    if (hang_->measured() && !measured)  // the auto deadline's first value
      DS_LOG_INFO("coord", "round {}: hang deadline now {}", round, hang_->DeadlineText());
  }
  if (r.phase == WorkerPhase::kStarting || r.phase == WorkerPhase::kUnknown) {
    r.phase = WorkerPhase::kRunning;
  }
  ChangedLocked();
  return OkStatus();
}

Status CoordinatorState::AppendLogs(const std::string& node_name, std::vector<LogLine> lines) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(NodeIndexLocked(node_name).status());
  for (LogLine& line : lines) logs_.Append(node_name, std::move(line));
  if (!lines.empty()) log_cv_.notify_all();
  return OkStatus();
}

// ---- KV store ----

StatusOr<int> CoordinatorState::KvRoundLocked(int round) const {
  DS_RETURN_IF_ERROR(EndedErrorLocked());
  const int current = rendezvous_.round();
  if (round == 0 || round == current) return current;
  return FailedPreconditionError("KV store of round " + std::to_string(round) +
                                 (round < current ? " is gone" : " does not exist") +
                                 "; the current round is " + std::to_string(current));
}

Status CoordinatorState::KvSet(int round, const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(KvRoundLocked(round).status());
  DS_RETURN_IF_ERROR(kv_.Set(key, std::move(value)));
  kv_cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> CoordinatorState::KvGet(int round, const std::string& key,
                                              std::chrono::milliseconds timeout,
                                              const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int r, KvRoundLocked(round));
  const SteadyTime deadline = clock_->Now() + timeout;
  for (;;) {
    if (const std::string* value = kv_.Find(key)) return *value;
    const std::string where = "key '" + key + "' is not set in round " + std::to_string(r);
    if (timeout.count() <= 0) return NotFoundError(where);
    if (clock_->Now() >= deadline) {
      return DeadlineExceededError(where + " after " + FormatSeconds(timeout));
    }
    Status s = WaitSliceLocked(lock, kv_cv_, wait, deadline);
    if (!s.ok()) return s.WithPrefix("waiting for key '" + key + "'");
    DS_RETURN_IF_ERROR(KvRoundLocked(r).status());  // the round ended while waiting
  }
}

Status CoordinatorState::KvWait(int round, const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout, const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  DS_ASSIGN_OR_RETURN(const int r, KvRoundLocked(round));
  const SteadyTime deadline = clock_->Now() + timeout;
  for (;;) {
    std::vector<std::string> missing = kv_.Missing(keys);
    if (missing.empty()) return OkStatus();
    if (clock_->Now() >= deadline) {
      return DeadlineExceededError(std::to_string(missing.size()) + " of " +
                                   std::to_string(keys.size()) + " keys not set in round " +
                                   std::to_string(r) + " after " + FormatSeconds(timeout) +
                                   ", missing: " + JoinKeys(missing));
    }
    Status s = WaitSliceLocked(lock, kv_cv_, wait, deadline);
    if (!s.ok()) return s.WithPrefix("waiting for keys " + JoinKeys(missing));
    DS_RETURN_IF_ERROR(KvRoundLocked(r).status());
  }
}

StatusOr<int64_t> CoordinatorState::KvAdd(int round, const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(KvRoundLocked(round).status());
  DS_ASSIGN_OR_RETURN(const int64_t value, kv_.Add(key, delta));
  kv_cv_.notify_all();
  return value;
}

// ---- the job ----

Status CoordinatorState::Stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (IsTerminal(phase_)) return OkStatus();
  EndJobLocked(JobPhase::kStopped, "stopped: " + (reason.empty() ? "by request" : reason));
  return OkStatus();
}

JobStatus CoordinatorState::Snapshot(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  const SteadyTime now = clock_->Now();
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  JobStatus status;
  status.job_id = config_.job.job_id;
  status.phase = phase_;
  status.round = rendezvous_.round();
  status.restarts = restarts_;
  status.max_restarts = config_.max_restarts;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeRecord& record = nodes_[i];
    NodeStatus node;
    node.name = config_.nodes[i].name;
    node.advertise_addr = record.advertise_addr;
    node.node_rank = record.node_rank;
    node.state = record.state;
    if (record.last_heartbeat) {
      node.last_heartbeat_ms_ago =
          duration_cast<milliseconds>(now - *record.last_heartbeat).count();
    }
    node.ranks = record.ranks;
    status.nodes.push_back(std::move(node));
  }
  status.ranks = ranks_;
  for (RankStatus& r : status.ranks) {
    if (!hang_) break;
    r.position = hang_->PositionOf(r.rank);
    r.position_age_ms = hang_->StandingFor(r.rank, now).count();
  }
  status.first_failure = first_failure_;
  status.uptime_ms = duration_cast<milliseconds>(now - started_at_).count();
  if (version != nullptr) *version = version_;
  return status;
}

uint64_t CoordinatorState::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

StatusOr<uint64_t> CoordinatorState::WaitForChange(uint64_t seen, const WaitOptions& wait) {
  std::unique_lock<std::mutex> lock(mu_);
  while (version_ == seen) {
    DS_RETURN_IF_ERROR(WaitSliceLocked(lock, change_cv_, wait, SteadyTime::max()));
  }
  return version_;
}

LogChunk CoordinatorState::ReadLogs(uint64_t cursor, size_t max_lines,
                                    std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const SteadyTime deadline = std::chrono::steady_clock::now() + wait;
  log_cv_.wait_until(lock, deadline, [&] { return closed_ || logs_.end() > cursor; });
  return logs_.Read(cursor, max_lines);
}

StatusOr<JobOutcome> CoordinatorState::WaitForEnd(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  if (!change_cv_.wait_until(lock, deadline, [&] { return closed_ || IsTerminal(phase_); })) {
    return DeadlineExceededError("the job is still " + std::string(JobPhaseName(phase_)) +
                                 " after " + FormatSeconds(timeout));
  }
  if (!IsTerminal(phase_)) return UnavailableError("the coordinator is shutting down");
  JobOutcome outcome;
  outcome.phase = phase_;
  outcome.round = rendezvous_.round();
  outcome.restarts = restarts_;
  outcome.first_failure = first_failure_;
  outcome.message = end_message_;
  return outcome;
}

bool CoordinatorState::WaitForShutdownDelivered(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  return change_cv_.wait_until(lock, deadline, [&] {
    if (!IsTerminal(phase_)) return false;
    for (const NodeRecord& node : nodes_) {
      if (node.node_rank >= 0 && node.state != AgentState::kLost && !node.shutdown_delivered) {
        return false;
      }
    }
    return true;
  });
}

void CoordinatorState::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  EvaluateLocked(clock_->Now());
  // Waiters measure their timeouts on the injected clock; let them look at it again.
  round_cv_.notify_all();
  kv_cv_.notify_all();
}

void CoordinatorState::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  round_cv_.notify_all();
  kv_cv_.notify_all();
  change_cv_.notify_all();
  log_cv_.notify_all();
}

}  // namespace ds::launcher
