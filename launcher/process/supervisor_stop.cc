// Supervisor: stopping and signalling (split from supervisor.cc to keep files small).
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "launcher/process/session_sweep.h"
#include "launcher/process/supervisor.h"
#include "runtime/base/logging.h"

namespace ds::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kLoopSlice{20};
constexpr int kOrphanPasses = 10;

std::string JoinPids(const std::set<pid_t>& pids) {
  std::string out;
  for (pid_t pid : pids) out += (out.empty() ? "" : " ") + std::to_string(pid);
  return out;
}

}  // namespace

bool Supervisor::SignalGroup(const Entry& e, int sig) const {
  // A child with its own session leads a process group whose id is its pid. Entries are
  // removed under mu_ right after waitpid, so e.pid is never a recycled pid here.
  if (e.sid > 0 && kill(-e.pid, sig) == 0) return true;
  return kill(e.pid, sig) == 0;
}

int Supervisor::ForwardSignal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  int count = 0;
  for (const auto& [id, e] : entries_) count += SignalGroup(e, sig) ? 1 : 0;
  return count;
}

// Waits until every one of `pids` is reaped and its exit reported. The loop runs on the reaper
// thread if there is one (and we are not on it); otherwise this thread drives it.
bool Supervisor::WaitUntilGone(const std::set<pid_t>& pids, Clock::time_point deadline) {
  auto gone = [&] {  // reaped and the exit reported
    for (const auto& [id, e] : entries_) {
      if (pids.count(e.pid) != 0) return false;
    }
    for (pid_t pid : undelivered_) {
      if (pids.count(pid) != 0) return false;
    }
    return true;
  };
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) {
    std::unique_lock<std::mutex> lock(mu_);
    return gone_.wait_until(lock, deadline, gone);
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone()) return true;
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    PollOnce(std::min(kLoopSlice,
                      std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1)));
  }
}

// SIGKILLs what is left in `sids`, then waits (until `deadline`) for the sessions to
// empty, re-sweeping to catch members forked meanwhile. Members die asynchronously, and
// the caller of StopAll expects the sessions to be empty when it returns.
int Supervisor::SweepSessions(const std::set<pid_t>& sids, Clock::time_point deadline) {
  std::vector<pid_t> targets;
  for (pid_t sid : sids) {
    // A session id is the leader's pid, which the kernel does not recycle while the
    // session has members. So a live process with that pid that is not our child means
    // the session is empty and the number is someone else's now: skip it.
    std::lock_guard<std::mutex> lock(mu_);
    bool tracked = false;
    for (const auto& [id, e] : entries_) tracked = tracked || e.pid == sid;
    internal::ProcStat stat;
    if (tracked || !internal::ReadProcStat(sid, &stat)) targets.push_back(sid);
  }
  int killed = 0;
  for (pid_t sid : targets) killed += SweepSession(sid, SIGKILL);
  for (;;) {
    targets.erase(std::remove_if(targets.begin(), targets.end(),
                                 [](pid_t sid) { return ProcessesInSession(sid).empty(); }),
                  targets.end());
    if (targets.empty() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(kLoopSlice);
    for (pid_t sid : targets) SweepSession(sid, SIGKILL);
  }
  if (!targets.empty()) {
    DS_LOG_WARN("agent", "sessions not empty after SIGKILL: {}",
                JoinPids(std::set<pid_t>(targets.begin(), targets.end())));
  }
  return killed;
}

// With subreaper, every untracked child of ours is a re-parented descendant of a worker
// (e.g. a daemon that left the session with setsid). Killing one re-parents its children
// to us in turn, so scan a few times. Runs under mu_ so that the loop cannot reap (and
// the kernel recycle) a pid between the scan and the kill.
int Supervisor::KillOrphans() {
  const pid_t self = getpid();
  std::set<pid_t> killed;
  for (int pass = 0; pass < kOrphanPasses; ++pass) {
    bool any_alive = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const internal::ProcStat& stat : internal::ListProcesses()) {
        if (stat.ppid != self || stat.state == 'Z' || stat.state == 'X') continue;
        bool tracked = false;
        for (const auto& [id, e] : entries_) tracked = tracked || e.pid == stat.pid;
        if (tracked) continue;
        any_alive = true;
        if (killed.count(stat.pid) == 0 && kill(stat.pid, SIGKILL) == 0) killed.insert(stat.pid);
      }
    }
    if (!any_alive) break;
    std::this_thread::sleep_for(kLoopSlice);
  }
  return static_cast<int>(killed.size());
}

Status Supervisor::StopAll(milliseconds grace) {
  std::set<pid_t> pids, sids;
  bool subreaper = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    subreaper = subreaper_;
    for (const auto& [id, e] : entries_) {
      pids.insert(e.pid);
      if (e.sid > 0) sids.insert(e.sid);
      SignalGroup(e, SIGTERM);
    }
  }
  if (!pids.empty()) {
    DS_LOG_INFO("agent", "stopping {} children (SIGTERM, grace {} ms)", pids.size(), grace.count());
  }
  if (!WaitUntilGone(pids, Clock::now() + grace)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (pids.count(e.pid) == 0) continue;
      DS_LOG_WARN("agent", "child {} (id {}) still running after {} ms: SIGKILL", e.pid, id,
                  grace.count());
      SignalGroup(e, SIGKILL);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sids.insert(stray_sessions_.begin(), stray_sessions_.end());
    stray_sessions_.clear();
  }
  const auto deadline = Clock::now() + kKillWait;
  const int swept = SweepSessions(sids, deadline);
  // Counts members of the groups just SIGKILLed that had not died yet, too.
  if (swept > 0) DS_LOG_INFO("agent", "sent SIGKILL to {} processes in worker sessions", swept);
  const bool reaped = WaitUntilGone(pids, deadline);
  if (subreaper) {
    const int orphans = KillOrphans();
    if (orphans > 0) DS_LOG_WARN("agent", "killed {} orphaned descendants", orphans);
  }
  if (reaped) return OkStatus();
  std::set<pid_t> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (pids.count(e.pid) != 0) left.insert(e.pid);
    }
  }
  return DeadlineExceededError("StopAll: children not reaped after SIGKILL: " + JoinPids(left));
}

}  // namespace ds::launcher
