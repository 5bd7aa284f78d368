#include "launcher/process/session_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

#include "runtime/base/logging.h"

namespace ds::launcher {
namespace internal {
namespace {

// Parses a decimal (optionally negative) integer at the front of `s`, skipping leading
// spaces, and advances `s` past it.
bool ConsumeInt(std::string_view* s, long* out) {
  while (!s->empty() && s->front() == ' ') s->remove_prefix(1);
  size_t i = 0;
  if (i < s->size() && (*s)[i] == '-') ++i;
  const size_t digits_start = i;
  long value = 0;
  while (i < s->size() && (*s)[i] >= '0' && (*s)[i] <= '9') {
    value = value * 10 + ((*s)[i] - '0');
    ++i;
  }
  if (i == digits_start) return false;
  *out = (*s)[0] == '-' ? -value : value;
  s->remove_prefix(i);
  return true;
}

}  // namespace

bool ParseProcStat(std::string_view text, ProcStat* out) {
  // "pid (comm) state ppid pgrp session ...": comm is whatever the process named itself
  // (prctl PR_SET_NAME or the executable's file name) and may hold ") " sequences.
  std::string_view head = text;
  long pid = 0;
  if (!ConsumeInt(&head, &pid)) return false;
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return false;
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty()) return false;
  const char state = rest.front();
  rest.remove_prefix(1);
  long ppid = 0, pgrp = 0, session = 0;
  if (!ConsumeInt(&rest, &ppid) || !ConsumeInt(&rest, &pgrp) || !ConsumeInt(&rest, &session)) {
    return false;
  }
  out->pid = static_cast<pid_t>(pid);
  out->state = state;
  out->ppid = static_cast<pid_t>(ppid);
  out->pgrp = static_cast<pid_t>(pgrp);
  out->session = static_cast<pid_t>(session);
  return true;
}

bool ReadProcStat(pid_t pid, ProcStat* out) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];  // comm is at most 64 bytes; the fields we need come right after it
  size_t len = 0;
  while (len < sizeof(buf)) {
    const ssize_t n = read(fd, buf + len, sizeof(buf) - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<size_t>(n);
  }
  close(fd);
  return len > 0 && ParseProcStat(std::string_view(buf, len), out);
}

std::vector<ProcStat> ListProcesses() {
  std::vector<ProcStat> result;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return result;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || end == entry->d_name || *end != '\0') continue;
    ProcStat stat;
    if (ReadProcStat(static_cast<pid_t>(pid), &stat)) result.push_back(stat);
  }
  closedir(dir);
  return result;
}

}  // namespace internal

namespace {

using internal::ProcStat;

bool IsDead(const ProcStat& stat) { return stat.state == 'Z' || stat.state == 'X'; }

// Signals `pid` if it is still a live member of `sid`. With a pidfd the check and the
// signal refer to the same process even if `pid` was recycled after the /proc scan.
bool SignalIfInSession(pid_t pid, pid_t sid, int sig) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    ProcStat stat;
    const bool member = internal::ReadProcStat(pid, &stat) && stat.session == sid && !IsDead(stat);
    const bool sent = member && syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
    close(pidfd);
    return sent;
  }
  if (errno == ESRCH) return false;  // already gone
#endif
  return kill(pid, sig) == 0;
}

}  // namespace

int SweepSession(pid_t sid, int sig) {
  if (sid <= 0) {
    DS_LOG_WARN("agent", "SweepSession: refusing session id {}", sid);
    return 0;
  }
  if (sid == getsid(0)) {
    DS_LOG_WARN("agent", "SweepSession: refusing to sweep this process's own session {}", sid);
    return 0;
  }
  const pid_t self = getpid();
  std::set<pid_t> signalled;
  // A member may fork between our scan and its signal; its child shows up in the next
  // pass. Stop when a pass finds nobody new (SIGKILL also aborts forks in progress).
  constexpr int kMaxPasses = 8;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool found_new = false;
    for (const ProcStat& stat : internal::ListProcesses()) {
      if (stat.session != sid || IsDead(stat) || stat.pid == self) continue;
      if (signalled.count(stat.pid) != 0) continue;
      if (SignalIfInSession(stat.pid, sid, sig)) {
        signalled.insert(stat.pid);
        found_new = true;
      }
    }
    if (!found_new) break;
  }
  return static_cast<int>(signalled.size());
}

std::vector<pid_t> ProcessesInSession(pid_t sid) {
  std::vector<pid_t> pids;
  for (const ProcStat& stat : internal::ListProcesses()) {
    if (stat.session == sid && !IsDead(stat)) pids.push_back(stat.pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace ds::launcher
