// Session sweep: finds and signals every process of a session by scanning /proc.
//
// The agent starts each worker in its own session (setsid), and the session id survives
// re-parenting, so after the worker and its process group are gone a sweep by session id
// still finds daemons it double-forked (see launcher.md 2.4). A process that calls
// setsid() itself leaves the session and escapes the sweep (only a cgroup catches that).
// Thread-safe (no shared state). Zombies are never reported or signalled: they are dead.
//
//   int n = SweepSession(child.sid, SIGKILL);   // leftovers of a stopped worker
//   if (n > 0) DS_LOG_WARN("agent", "killed {} stray processes", n);
#pragma once

#include <sys/types.h>

#include <string_view>
#include <vector>

namespace ds::launcher {

// Sends `sig` to every live process whose session id is `sid` and returns how many were
// signalled. Never signals the caller, and refuses (returns 0, logs a warning) when `sid`
// is not positive or is the caller's own session. Rescans (a few passes, bounded) while
// new members show up, so children forked during the sweep are caught as well. Uses
// pidfds when the kernel has them, so a pid reused between scan and kill is not hit.
int SweepSession(pid_t sid, int sig);

// The pids of the live (non-zombie) processes in session `sid`, ascending.
std::vector<pid_t> ProcessesInSession(pid_t sid);

namespace internal {

// The fields of /proc/<pid>/stat that the sweep needs.
struct ProcStat {
  pid_t pid = -1;
  char state = '?';  // 'R', 'S', 'D', 'Z', ...
  pid_t ppid = -1;
  pid_t pgrp = -1;
  pid_t session = -1;
};

// Parses one /proc/<pid>/stat line. comm (field 2) may contain spaces and parentheses,
// so the fields after it are read from after the *last* ')'. False on malformed text.
bool ParseProcStat(std::string_view text, ProcStat* out);
// Reads and parses /proc/<pid>/stat; false if the process is gone or unreadable.
bool ReadProcStat(pid_t pid, ProcStat* out);
// All processes (thread-group leaders) visible in /proc, zombies included.
std::vector<ProcStat> ListProcesses();

}  // namespace internal
}  // namespace ds::launcher
