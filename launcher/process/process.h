// Spawn: fork+exec of one worker process with its output captured through pipes.
//
// The child gets its own session and process group (setsid), a parent-death signal, an
// optional CPU affinity, stdin from /dev/null, stdout and stderr on two pipes, a clean
// signal mask, and exactly the environment the caller composed. Failures before or at
// exec (bad cwd, affinity, program not found) come back from Spawn as an error naming the
// program; a returned Child has passed execve. Thread-safe: may be called from any thread,
// but see `parent_death_signal` for which thread should call it.
//
//   SpawnOptions opts;
//   opts.argv = {"/opt/ds/bin/ds-worker", "--rank=3"};
//   opts.env = {{"PATH", "/usr/bin:/bin"}, {"RANK", "3"}};
//   DS_ASSIGN_OR_RETURN(Child child, Spawn(opts));   // hand it to Supervisor::Add
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

struct SpawnOptions {
  // Program and arguments. argv[0] is run as is when it contains '/', else searched in
  // the PATH of `env` (default "/usr/local/bin:/usr/bin:/bin" when env has none).
  std::vector<std::string> argv;
  // The child's whole environment; nothing is inherited from the caller.
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;          // working directory; empty = the caller's
  std::vector<int> cpus;    // CPU affinity (CPU numbers); empty = inherit
  bool new_session = true;  // setsid(): own session and process group
  // Signal the child gets when the *thread* that called Spawn exits (Linux
  // PR_SET_PDEATHSIG semantics), so call Spawn from a thread that lives as long as the
  // agent. 0 = none.
  int parent_death_signal = SIGKILL;
  bool stdin_pipe =
      false;  // true: stdin is a pipe whose write end is Child::stdin_fd, else /dev/null
};

// A started child. The fds are owned by whoever holds the Child (Supervisor::Add takes
// them); CloseChildFds() releases them otherwise.
struct Child {
  pid_t pid = -1;
  pid_t sid = -1;      // session id (= pid) with new_session, else -1 (caller's session)
  int stdout_fd = -1;  // read end of the child's stdout pipe, O_NONBLOCK | O_CLOEXEC
  int stderr_fd = -1;  // read end of the child's stderr pipe, O_NONBLOCK | O_CLOEXEC
  int stdin_fd =
      -1;  // with stdin_pipe: write end of the child's stdin (O_CLOEXEC); the caller owns it
};

// Starts the child described by `options`. Returns InvalidArgument for an empty argv or
// a CPU number out of range, and for failures in the child before or at exec the
// ErrnoToStatus code with the step and program in the message, e.g. NotFound
// "exec /x/ds-worker: No such file or directory" or "chdir /data (for ds-worker): ...";
// such a child has been reaped already. Blocks until the child has exec'd or failed
// (bounded: a child stuck before exec for 30 s is killed and DeadlineExceeded returned).
StatusOr<Child> Spawn(const SpawnOptions& options);

// Closes the child's pipe fds (if open) and sets them to -1. Does not touch the process.
void CloseChildFds(Child* child);

}  // namespace ds::launcher
