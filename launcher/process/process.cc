#include "launcher/process/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";
constexpr int kExecReportTimeoutMs = 30000;
#ifndef CLOSE_RANGE_CLOEXEC
constexpr unsigned kCloseRangeCloexec = 1U << 2;
#else
constexpr unsigned kCloseRangeCloexec = CLOSE_RANGE_CLOEXEC;
#endif

// The step at which a child failed, sent with errno through the report pipe.
enum Step : int {
  kStepStdio = 1,
  kStepSetsid,
  kStepPdeathsig,
  kStepChdir,
  kStepAffinity,
  kStepExec
};
struct ChildReport {
  int step;
  int err;
};

// Everything the child needs, built before fork: after fork in a multi-threaded parent
// only async-signal-safe calls are allowed (no malloc, no locks).
struct ExecPlan {
  std::vector<std::string> candidates;  // paths to execve, in order
  std::vector<std::string> env_strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  const char* cwd = nullptr;
  bool set_affinity = false;
  cpu_set_t cpus;
  bool new_session = true;
  int death_signal = 0;
  pid_t parent = -1;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, report_fd = -1;
};

std::vector<std::string> ExecCandidates(const SpawnOptions& options) {
  const std::string& program = options.argv[0];
  if (program.find('/') != std::string::npos) return {program};
  std::string path = kDefaultPath;
  for (const auto& [key, value] : options.env) {
    if (key == "PATH") path = value;
  }
  std::vector<std::string> result;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);
    result.push_back(dir + "/" + program);
    begin = end + 1;
  }
  return result;
}

// Moves `fd` above stderr (so the dup2 calls in the child cannot clobber it), CLOEXEC.
int AboveStdio(int fd) {
  if (fd < 0 || fd > STDERR_FILENO) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  const int saved_errno = errno;
  close(fd);
  errno = saved_errno;
  return moved;
}

Status MakePipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  fds[0] = AboveStdio(fds[0]);
  fds[1] = AboveStdio(fds[1]);
  if (fds[0] < 0 || fds[1] < 0) return ErrnoToStatus(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return OkStatus();
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

[[noreturn]] void ChildFail(const ExecPlan& plan, int step, int err) {
  const ChildReport report{step, err};
  ssize_t unused = write(plan.report_fd, &report, sizeof(report));
  (void)unused;
  _exit(127);
}

// Runs in the forked child. Async-signal-safe calls only.
[[noreturn]] void RunChild(const ExecPlan& plan) {
  // A blocked mask and ignored signals survive exec; the worker starts clean.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // KILL/STOP fail

  if (plan.new_session && setsid() < 0) ChildFail(plan, kStepSetsid, errno);
  if (plan.death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, plan.death_signal) != 0) ChildFail(plan, kStepPdeathsig, errno);
    // The parent may have died between fork and prctl; then no signal will ever come.
    if (getppid() != plan.parent) {
      kill(getpid(), plan.death_signal);
      _exit(128 + plan.death_signal);
    }
  }
  if (dup2(plan.stdin_fd, STDIN_FILENO) < 0 || dup2(plan.stdout_fd, STDOUT_FILENO) < 0 ||
      dup2(plan.stderr_fd, STDERR_FILENO) < 0) {
    ChildFail(plan, kStepStdio, errno);
  }
  // fds another thread opened without O_CLOEXEC must not leak into the worker.
#ifdef SYS_close_range
  syscall(SYS_close_range, STDERR_FILENO + 1, ~0U, kCloseRangeCloexec);
#endif
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) ChildFail(plan, kStepChdir, errno);
  if (plan.set_affinity && sched_setaffinity(0, sizeof(plan.cpus), &plan.cpus) != 0) {
    ChildFail(plan, kStepAffinity, errno);
  }
  // Like execvpe: try each PATH entry; EACCES from one entry wins over a later ENOENT.
  int err = ENOENT;
  bool saw_eacces = false;
  for (const std::string& path : plan.candidates) {
    execve(path.c_str(), plan.argv.data(), plan.envp.data());
    err = errno;
    if (err == EACCES) {
      saw_eacces = true;
    } else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV) {
      break;
    }
  }
  if (saw_eacces && (err == ENOENT || err == ENOTDIR)) err = EACCES;
  ChildFail(plan, kStepExec, err);
}

std::string FailureContext(const SpawnOptions& options, int step) {
  const std::string& program = options.argv[0];
  switch (step) {
    case kStepExec:
      return "exec " + program;
    case kStepChdir:
      return "chdir " + options.cwd + " (for " + program + ")";
    case kStepAffinity:
      return "sched_setaffinity (for " + program + ")";
    case kStepSetsid:
      return "setsid (for " + program + ")";
    case kStepPdeathsig:
      return "prctl(PR_SET_PDEATHSIG) (for " + program + ")";
    default:
      return "dup2 of stdio (for " + program + ")";
  }
}

// Waits for the child's report: EOF means execve succeeded (the CLOEXEC write end
// closed). Returns OK, or the child's failure (the child is reaped then).
Status AwaitExec(const SpawnOptions& options, pid_t pid, int report_fd) {
  ChildReport report{};
  size_t got = 0;
  while (got < sizeof(report)) {
    pollfd pfd{report_fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, kExecReportTimeoutMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return DeadlineExceededError("spawn " + options.argv[0] + ": child did not exec within " +
                                   std::to_string(kExecReportTimeoutMs / 1000) + " s");
    }
    const ssize_t n = read(report_fd, reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return OkStatus();
  // The child _exits right after reporting. ECHILD here means a subreaper's reaper
  // thread took it first, which is fine.
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (got < sizeof(report)) return InternalError("spawn " + options.argv[0] + ": short report");
  return ErrnoToStatus(report.err, FailureContext(options, report.step));
}

Status BuildPlan(const SpawnOptions& options, ExecPlan* plan) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return InvalidArgumentError("Spawn: argv is empty");
  }
  CPU_ZERO(&plan->cpus);
  for (int cpu : options.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return InvalidArgumentError("Spawn " + options.argv[0] + ": CPU " + std::to_string(cpu) +
                                  " out of range");
    }
    CPU_SET(cpu, &plan->cpus);
  }
  plan->set_affinity = !options.cpus.empty();
  plan->candidates = ExecCandidates(options);
  for (const std::string& arg : options.argv) plan->argv.push_back(const_cast<char*>(arg.c_str()));
  plan->argv.push_back(nullptr);
  plan->env_strings.reserve(options.env.size());
  for (const auto& [key, value] : options.env) plan->env_strings.push_back(key + "=" + value);
  for (std::string& kv : plan->env_strings) plan->envp.push_back(kv.data());
  plan->envp.push_back(nullptr);
  plan->cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  plan->new_session = options.new_session;
  plan->death_signal = options.parent_death_signal;
  plan->parent = getpid();
  return OkStatus();
}

}  // namespace

StatusOr<Child> Spawn(const SpawnOptions& options) {
  ExecPlan plan;
  DS_RETURN_IF_ERROR(BuildPlan(options, &plan));
  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
  int null_fd = -1;
  int in[2] = {-1, -1};
  auto close_all = [&] {
    for (int* fd :
         {&out[0], &out[1], &err[0], &err[1], &report[0], &report[1], &null_fd, &in[0], &in[1]}) {
      CloseFd(fd);
    }
  };
  Status status = MakePipe(out);
  if (status.ok()) status = MakePipe(err);
  if (status.ok()) status = MakePipe(report);
  if (status.ok() && options.stdin_pipe) {
    status = MakePipe(in);
  } else if (status.ok()) {
    null_fd = AboveStdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (null_fd < 0) status = ErrnoToStatus(errno, "open(/dev/null)");
  }
  if (!status.ok()) {
    close_all();
    return status;
  }
  plan.stdin_fd = options.stdin_pipe ? in[0] : null_fd;
  plan.stdout_fd = out[1];
  plan.stderr_fd = err[1];
  plan.report_fd = report[1];

  const pid_t pid = fork();
  if (pid < 0) {
    const int fork_errno = errno;
    close_all();
    return ErrnoToStatus(fork_errno, "fork (for " + options.argv[0] + ")");
  }
  if (pid == 0) RunChild(plan);

  for (int* fd : {&out[1], &err[1], &report[1], &null_fd, &in[0]}) CloseFd(fd);
  status = AwaitExec(options, pid, report[0]);
  CloseFd(&report[0]);
  if (!status.ok()) {
    close_all();
    return status;
  }
  // Only the parent's read ends are non-blocking; the child's write ends stay blocking.
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  Child child;
  child.pid = pid;
  child.sid = options.new_session ? pid : -1;
  child.stdout_fd = out[0];
  child.stderr_fd = err[0];
  child.stdin_fd = in[1];
  DS_LOG_DEBUG("agent", "spawned {} as pid {}", options.argv[0], pid);
  return child;
}

void CloseChildFds(Child* child) {
  CloseFd(&child->stdin_fd);
  CloseFd(&child->stdout_fd);
  CloseFd(&child->stderr_fd);
}

}  // namespace ds::launcher
