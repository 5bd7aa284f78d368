// Supervisor: watches the agent's worker processes. Forwards their output line by line,
// keeps the last lines of each for failure reports, reaps them promptly, reports every
// exit exactly once, and stops them: SIGTERM to each process group, a grace period,
// SIGKILL, then a sweep of each worker's session (launcher.md Part 3 item 5).
//
// Thread-safe. The callbacks run on the thread that drives the event loop: the "ds-reaper"
// thread after Start(), else the caller of Poll() (or of StopAll(), which drives the loop
// itself while it waits); never two at once, never with an internal lock held, so they may
// call back into the Supervisor (StopAll from the exit callback is fine). The callbacks
// must outlive the Supervisor; the destructor calls none of them.
//
//   Supervisor sup(on_log, on_exit);
//   DS_RETURN_IF_ERROR(sup.EnableSubreaper());
//   DS_RETURN_IF_ERROR(sup.Start());
//   DS_RETURN_IF_ERROR(sup.Add(local_rank, std::move(child)));   // child from Spawn()
//   ...  sup.StopAll(std::chrono::seconds(10));
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "launcher/process/line_reader.h"
#include "launcher/process/process.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct ExitInfo {
  pid_t pid = -1;
  bool signaled = false;   // true: killed by signal `code_or_signal`
  int code_or_signal = 0;  // exit code (-1: unknown, someone else reaped it), or signal
  std::vector<std::string> last_lines;  // last lines of stdout and stderr, oldest first
  int64_t exit_ms = 0;  // Unix epoch ms when the exit was seen (reaped), not when delivered
  // "exit code 3" or "signal 9 (SIGKILL)".
  std::string ToString() const;
};

class Supervisor {
 public:
  using LogCallback = std::function<void(int id, bool is_stderr, std::string_view line)>;
  using ExitCallback = std::function<void(int id, ExitInfo info)>;

  static constexpr size_t kTailLines = 50;  // lines kept per child for ExitInfo
  // How long StopAll waits for the children to be reaped after SIGKILL.
  static constexpr std::chrono::milliseconds kKillWait{5000};

  Supervisor(LogCallback on_log, ExitCallback on_exit);
  // SIGKILLs the groups and sessions of children still tracked, reaps them (bounded),
  // stops the thread. No callbacks are called from here: StopAll first for exit reports.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Makes this process a child subreaper: orphans of the workers (double-forked daemons)
  // are re-parented to us instead of init, reaped by the loop, and killed by StopAll.
  // From then on the loop reaps *every* child of this process with waitpid(-1), so the
  // embedding process must not wait for children of its own.
  Status EnableSubreaper();
  // Starts the "ds-reaper" thread that runs the loop. Call once, before other threads use
  // the Supervisor. FailedPrecondition if started.
  Status Start();
  // Without Start(): runs one loop iteration, waiting up to `timeout` for output or exits,
  // then calls the callbacks. FailedPrecondition when the thread is running.
  Status Poll(std::chrono::milliseconds timeout);

  // Tracks `child` under `id` (e.g. the local rank) and takes its pipe fds. A child that
  // already exited (even one already reaped as an orphan) is still reported once.
  // AlreadyExists if `id` is tracked, InvalidArgument for a bad pid; on error nothing
  // is taken.
  Status Add(int id, Child child);

  // Stops every tracked child: SIGTERM to its process group, up to `grace` for all to
  // exit, SIGKILL to the groups left, SIGKILL to whatever is left in their sessions (and in
  // the sessions of children that exited earlier leaving members behind) until those
  // sessions are empty, then, with EnableSubreaper, SIGKILL to untracked children of this
  // process. Blocks until the children are reaped and their exits reported: at most about
  // grace + kKillWait, else DeadlineExceeded naming the pids. Children added meanwhile
  // are not stopped.
  Status StopAll(std::chrono::milliseconds grace);

  // Sends `sig` to every tracked child's process group; returns how many were signalled.
  int ForwardSignal(int sig);

  size_t num_tracked() const;
  // The last lines of a tracked child (empty for an unknown id).
  std::vector<std::string> LastLines(int id) const;

 private:
  struct Entry {
    pid_t pid = -1;
    pid_t sid = -1;
    int fds[2] = {-1, -1};  // stdout, stderr; -1 once closed
    int pidfd = -1;         // readable when the child exits; -1 if unsupported
    LineReader readers[2];
    std::deque<std::string> tail;
    bool reaped_early = false;  // already reaped before Add; status in early_status
    int early_status = -1;      // wait status, -1 unknown
  };
  struct Event {
    int id = 0;
    int stream = 0;  // 0 stdout line, 1 stderr line, 2 exit
    std::string line;
    ExitInfo exit;
  };

  void PollOnce(std::chrono::milliseconds timeout);
  void Dispatch();
  void ReadStream(int id, Entry& e, int stream, bool at_exit);
  void Reap();
  void FinishEntry(std::map<int, Entry>::iterator it, int status);
  void RecordOrphan(pid_t pid, int status);
  bool SignalGroup(const Entry& e, int sig) const;
  bool WaitUntilGone(const std::set<pid_t>& pids, std::chrono::steady_clock::time_point deadline);
  int SweepSessions(const std::set<pid_t>& sids, std::chrono::steady_clock::time_point deadline);
  int KillOrphans();
  void Wake();

  // Fixed at construction.
  const LogCallback on_log_;
  const ExitCallback on_exit_;
  int wake_fds_[2] = {-1, -1};  // self-pipe: Add() and the destructor interrupt poll()

  mutable std::mutex mu_;
  std::condition_variable gone_;               // an exit report was delivered
  std::map<int, Entry> entries_;               // guarded by mu_
  std::deque<Event> events_;                   // guarded by mu_: not yet delivered
  std::set<pid_t> undelivered_;                // guarded by mu_: reaped, exit not reported
  std::set<pid_t> stray_sessions_;             // guarded by mu_
  std::deque<std::pair<pid_t, int>> orphans_;  // guarded by mu_: (pid, wait status)
  bool subreaper_ = false;                     // guarded by mu_

  std::mutex loop_mu_;                // held by whichever thread runs PollOnce's I/O part
  std::recursive_mutex dispatch_mu_;  // held while calling back (re-entered by StopAll)
  std::thread thread_;                // the "ds-reaper" thread, if started
  std::atomic<bool> stop_{false};
  std::atomic<bool> quiet_{false};  // set by the destructor: no more callbacks
};

}  // namespace ds::launcher
