#include "launcher/process/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "launcher/process/session_sweep.h"
#include "runtime/base/logging.h"

namespace ds::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kReapTick{50};  // waitpid(-1) period for orphans / no pidfd
constexpr milliseconds kThreadIdle{500};
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxChunksPerRead = 16;  // per stream per iteration: fairness among children
constexpr size_t kOrphanRecords = 256;

int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);  // pidfds are CLOEXEC already; be explicit
  return fd;
#else
  return -1;
#endif
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

}  // namespace

std::string ExitInfo::ToString() const {
  if (!signaled) return "exit code " + std::to_string(code_or_signal);
  const char* abbrev = sigabbrev_np(code_or_signal);
  return "signal " + std::to_string(code_or_signal) + " (SIG" + (abbrev ? abbrev : "?") + ")";
}

Supervisor::Supervisor(LogCallback on_log, ExitCallback on_exit)
    : on_log_(std::move(on_log)), on_exit_(std::move(on_exit)) {
  if (pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    // Not fatal: the loop then wakes every kReapTick instead of at once.
    DS_LOG_WARN("agent", "supervisor: pipe2 failed: {}", std::strerror(errno));
    wake_fds_[0] = wake_fds_[1] = -1;
  }
}

Supervisor::~Supervisor() {
  quiet_ = true;
  if (num_tracked() > 0) {
    const Status status = StopAll(milliseconds(0));
    if (!status.ok()) DS_LOG_ERROR("agent", "supervisor shutdown: {}", status.ToString());
  }
  stop_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
  for (auto& [id, e] : entries_) {  // only children StopAll could not reap
    CloseFd(&e.fds[0]);
    CloseFd(&e.fds[1]);
    CloseFd(&e.pidfd);
  }
  CloseFd(&wake_fds_[0]);
  CloseFd(&wake_fds_[1]);
}

Status Supervisor::EnableSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return ErrnoToStatus(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  subreaper_ = true;
  return OkStatus();
}

Status Supervisor::Start() {
  if (thread_.joinable()) return FailedPreconditionError("Supervisor: already started");
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ds-reaper");
    while (!stop_) PollOnce(kThreadIdle);
  });
  return OkStatus();
}

Status Supervisor::Poll(milliseconds timeout) {
  if (thread_.joinable()) return FailedPreconditionError("Supervisor: Poll() with the thread");
  PollOnce(timeout);
  return OkStatus();
}

Status Supervisor::Add(int id, Child child) {
  if (child.pid <= 0) return InvalidArgumentError("Supervisor::Add: bad pid");
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(id) != 0) {
    return AlreadyExistsError("Supervisor::Add: id " + std::to_string(id) + " is tracked");
  }
  Entry& e = entries_[id];
  e.pid = child.pid;
  e.sid = child.sid;
  e.fds[0] = child.stdout_fd;
  e.fds[1] = child.stderr_fd;
  e.pidfd = OpenPidfd(child.pid);
  // With subreaper the loop's waitpid(-1) may have reaped the child as an "orphan"
  // between Spawn and Add: then it is no longer our child, and the record has its status.
  siginfo_t info{};
  if (waitid(P_PID, child.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD) {
    e.reaped_early = true;
    for (const auto& [pid, status] : orphans_) {
      if (pid == child.pid) e.early_status = status;
    }
  }
  Wake();
  return OkStatus();
}

void Supervisor::Wake() {
  if (wake_fds_[1] < 0) return;
  const char byte = 1;
  ssize_t unused = write(wake_fds_[1], &byte, 1);  // EAGAIN: a wake-up is pending anyway
  (void)unused;
}

void Supervisor::PollOnce(milliseconds timeout) {
  {
    std::lock_guard<std::mutex> loop(loop_mu_);
    std::vector<pollfd> pfds;
    std::vector<std::pair<int, int>> owners;  // (id, stream 0/1, or 2 = pidfd)
    bool tick = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tick = subreaper_ || wake_fds_[0] < 0;
      for (auto& [id, e] : entries_) {
        for (int s = 0; s < 2; ++s) {
          if (e.fds[s] >= 0) {
            pfds.push_back({e.fds[s], POLLIN, 0});
            owners.emplace_back(id, s);
          }
        }
        if (e.pidfd >= 0) {
          pfds.push_back({e.pidfd, POLLIN, 0});
          owners.emplace_back(id, 2);
        } else {
          tick = true;
        }
        if (e.reaped_early) timeout = milliseconds(0);
      }
    }
    if (wake_fds_[0] >= 0) pfds.push_back({wake_fds_[0], POLLIN, 0});
    if (tick) timeout = std::min(timeout, kReapTick);
    const int ready = poll(pfds.data(), pfds.size(), static_cast<int>(timeout.count()));
    if (ready > 0 && wake_fds_[0] >= 0 && pfds.back().revents != 0) {
      char buf[64];
      while (read(wake_fds_[0], buf, sizeof(buf)) > 0) {
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; ready > 0 && i < owners.size(); ++i) {
      const auto [id, stream] = owners[i];
      if (stream == 2 || pfds[i].revents == 0) continue;
      auto it = entries_.find(id);
      if (it != entries_.end()) ReadStream(id, it->second, stream, /*at_exit=*/false);
    }
    Reap();
  }
  Dispatch();
}

// Delivers the queued events in order. Re-entrant: a callback that drives the loop
// (StopAll) continues with the same queue, so order is kept and nothing waits on an event
// stuck in an outer frame. dispatch_mu_ keeps two threads from calling back at once.
void Supervisor::Dispatch() {
  std::lock_guard<std::recursive_mutex> dispatching(dispatch_mu_);
  for (;;) {
    Event ev;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (events_.empty()) return;
      ev = std::move(events_.front());
      events_.pop_front();
    }
    if (ev.stream != 2) {
      if (on_log_ && !quiet_) on_log_(ev.id, ev.stream == 1, ev.line);
      continue;
    }
    const pid_t pid = ev.exit.pid;
    if (on_exit_ && !quiet_) on_exit_(ev.id, std::move(ev.exit));
    std::lock_guard<std::mutex> lock(mu_);
    undelivered_.erase(pid);
    gone_.notify_all();
  }
}

// mu_ held. Reads what is available (bounded) and hands out complete lines. At EOF, or
// with `at_exit` once the pipe is empty, flushes the partial line and closes the fd.
void Supervisor::ReadStream(int id, Entry& e, int stream, bool at_exit) {
  if (e.fds[stream] < 0) return;
  auto on_line = [&](std::string_view line) {
    e.tail.emplace_back(line);
    if (e.tail.size() > kTailLines) e.tail.pop_front();
    events_.push_back(Event{id, stream, std::string(line), {}});
  };
  char buf[kReadChunk];
  bool done = at_exit;  // at exit, whatever is not read within the bound is dropped
  for (int chunk = 0; chunk < kMaxChunksPerRead; ++chunk) {
    const ssize_t n = read(e.fds[stream], buf, sizeof(buf));
    if (n > 0) {
      e.readers[stream].Feed(std::string_view(buf, static_cast<size_t>(n)), on_line);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) done = true;  // EOF or error
    break;
  }
  if (!done) return;
  e.readers[stream].Finish(on_line);
  CloseFd(&e.fds[stream]);
}

// mu_ held, so no signal can hit a pid between its reaping and its removal.
void Supervisor::Reap() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.reaped_early) FinishEntry(it, it->second.early_status);
    it = next;
  }
  if (subreaper_) {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = std::find_if(entries_.begin(), entries_.end(),
                             [pid](const auto& kv) { return kv.second.pid == pid; });
      if (it != entries_.end()) {
        FinishEntry(it, status);
      } else {
        RecordOrphan(pid, status);
      }
    }
    return;
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    int status = 0;
    const pid_t pid = waitpid(it->second.pid, &status, WNOHANG);
    if (pid == it->second.pid) {
      FinishEntry(it, status);
    } else if (pid < 0 && errno == ECHILD) {
      DS_LOG_WARN("agent", "child {} (id {}) was reaped by someone else; exit status unknown",
                  it->second.pid, it->first);
      FinishEntry(it, -1);
    }
    it = next;
  }
}

void Supervisor::RecordOrphan(pid_t pid, int status) {
  DS_LOG_DEBUG("agent", "reaped orphan pid {} (wait status {:#x})", pid, status);
  orphans_.emplace_back(pid, status);
  if (orphans_.size() > kOrphanRecords) orphans_.pop_front();
}

// mu_ held. Drains the pipes (data written before the exit is already there), reports the
// exit after the last lines, and forgets the child. Output written later by descendants
// that inherited the pipes is dropped: they get EPIPE.
void Supervisor::FinishEntry(std::map<int, Entry>::iterator it, int status) {
  const int id = it->first;
  Entry& e = it->second;
  for (int s = 0; s < 2; ++s) ReadStream(id, e, s, /*at_exit=*/true);
  CloseFd(&e.pidfd);
  Event ev;
  ev.id = id;
  ev.stream = 2;
  ev.exit.pid = e.pid;
  if (status == -1) {
    ev.exit.code_or_signal = -1;
  } else if (WIFSIGNALED(status)) {
    ev.exit.signaled = true;
    ev.exit.code_or_signal = WTERMSIG(status);
  } else {
    ev.exit.code_or_signal = WEXITSTATUS(status);
  }
  ev.exit.last_lines.assign(e.tail.begin(), e.tail.end());
  ev.exit.exit_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  DS_LOG_DEBUG("agent", "child {} (id {}) exited: {}", e.pid, id, ev.exit.ToString());
  // Members left in its session are strays for the next StopAll to sweep.
  if (e.sid > 0 && !ProcessesInSession(e.sid).empty()) stray_sessions_.insert(e.sid);
  undelivered_.insert(e.pid);
  events_.push_back(std::move(ev));
  entries_.erase(it);
}

size_t Supervisor::num_tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::vector<std::string> Supervisor::LastLines(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return {};
  return {it->second.tail.begin(), it->second.tail.end()};
}

}  // namespace ds::launcher
