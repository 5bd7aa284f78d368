// Helpers for the process tests: bounded waits on real processes. Test-only.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "launcher/process/process.h"
#include "launcher/process/session_sweep.h"

namespace ds::launcher::testing {

using std::chrono::milliseconds;

inline SpawnOptions Shell(const std::string& script) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.env = {{"PATH", "/usr/bin:/bin"}};
  return options;
}

// Polls `done` every 5 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// Alive = exists and is not a zombie.
inline bool IsAlive(pid_t pid) {
  internal::ProcStat stat;
  return internal::ReadProcStat(pid, &stat) && stat.state != 'Z' && stat.state != 'X';
}

// Gone from /proc entirely (reaped).
inline bool IsReaped(pid_t pid) {
  internal::ProcStat stat;
  return !internal::ReadProcStat(pid, &stat);
}

// waitpid with a deadline. Returns false on timeout.
inline bool WaitExit(pid_t pid, milliseconds timeout, int* status) {
  return WaitFor([&] { return waitpid(pid, status, WNOHANG) == pid; }, timeout);
}

// Reads `fd` until EOF or `timeout`.
inline std::string ReadAll(int fd, milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      return out;
    }
  }
}

// Whether a thread of this process has the name `name` (/proc/self/task/*/comm).
inline bool HasThreadNamed(const std::string& name) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return false;
  bool found = false;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/comm";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[32] = {};
    const ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n > 0 && std::string(buf, static_cast<size_t>(n)) == name + "\n") found = true;
  }
  closedir(dir);
  return found;
}

// The first CPU this process may run on.
inline int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return 0;
}

}  // namespace ds::launcher::testing
