#include "launcher/process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdlib>
#include <string>

#include "launcher/process/session_sweep.h"
#include "launcher/process/test_util.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using testing::IsAlive;
using testing::ReadAll;
using testing::Shell;
using testing::WaitExit;
using testing::WaitFor;

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/spawn_XXXXXX";
  REQUIRE(mkdtemp(templ.data()) != nullptr);
  char real[PATH_MAX];
  REQUIRE(realpath(templ.c_str(), real) != nullptr);
  return real;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs `options`, returns its stdout; the child must exit 0 within 10 s.
std::string RunToCompletion(const SpawnOptions& options, std::string* err = nullptr) {
  StatusOr<Child> child = Spawn(options);
  REQUIRE(child.ok());
  std::string out = ReadAll(child->stdout_fd, milliseconds(10000));
  std::string errors = ReadAll(child->stderr_fd, milliseconds(10000));
  int status = 0;
  REQUIRE(WaitExit(child->pid, milliseconds(10000), &status));
  CloseChildFds(&*child);
  INFO("stderr: " << errors);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  if (err != nullptr) *err = errors;
  return out;
}

TEST_CASE("Spawn: env, cwd, affinity, session, stdio and signal state", "[launcher][process]") {
  const std::string dir = TempDir();
  const int cpu = testing::FirstAllowedCpu();
  setenv("DS_PROCESS_TEST_MARKER", "leak", 1);
  // Blocked and ignored signals in the parent must not reach the worker.
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  struct sigaction ign = {}, old_pipe = {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);
  const int leaked_fd = open("/dev/null", O_RDONLY);  // no O_CLOEXEC on purpose

  SpawnOptions options = Shell(
      "echo \"FOO=$FOO\"; echo \"MARKER=$DS_PROCESS_TEST_MARKER\"; pwd; "
      "grep Cpus_allowed_list /proc/self/status; cut -d' ' -f6 /proc/$$/stat; "
      "readlink /proc/$$/fd/0; echo fds:; ls /proc/$$/fd; echo end-fds; "
      // grep reads its own mask: the shell's (dash blocks every signal while it waits for a
      // child, so /proc/$$/status would show that, not what Spawn gave it); dash's children
      // start from the mask the shell was given.
      "grep -E 'SigBlk|SigIgn' /proc/self/status; echo to-stderr >&2");
  options.env.emplace_back("FOO", "bar baz");
  options.cwd = dir;
  options.cpus = {cpu};
  StatusOr<Child> child = Spawn(options);

  close(leaked_fd);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  unsetenv("DS_PROCESS_TEST_MARKER");
  REQUIRE(child.ok());
  CHECK(child->sid == child->pid);
  for (int fd : {child->stdout_fd, child->stderr_fd}) {
    CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  const std::string out = ReadAll(child->stdout_fd, milliseconds(10000));
  const std::string err = ReadAll(child->stderr_fd, milliseconds(10000));
  int status = 0;
  REQUIRE(WaitExit(child->pid, milliseconds(10000), &status));
  CloseChildFds(&*child);
  INFO(out);
  CHECK(Contains(out, "FOO=bar baz\n"));
  CHECK(Contains(out, "MARKER=\n"));  // nothing inherited beyond options.env
  CHECK(Contains(out, "\n" + dir + "\n"));
  CHECK(Contains(out, "Cpus_allowed_list:\t" + std::to_string(cpu) + "\n"));
  CHECK(Contains(out, "\n" + std::to_string(child->pid) + "\n"));  // own session
  CHECK(Contains(out, "/dev/null\n"));
  CHECK(Contains(out, "fds:\n0\n1\n2\nend-fds\n"));  // no leaked fds
  CHECK(Contains(out, "SigBlk:\t0000000000000000\n"));
  // Standard signals 1-31 not ignored (glibc keeps its internal 32 and 33 to itself).
  const size_t sig_ign = out.find("SigIgn:\t");
  REQUIRE(sig_ign != std::string::npos);
  const unsigned long long ignored = std::strtoull(out.c_str() + sig_ign + 8, nullptr, 16);
  CHECK((ignored & 0x7fffffffULL) == 0);
  CHECK(err == "to-stderr\n");
  CHECK(WIFEXITED(status));
}

TEST_CASE("Spawn: PATH lookup uses the child's environment", "[launcher][process]") {
  SpawnOptions options;
  options.argv = {"sh", "-c", "echo found"};
  options.env = {{"PATH", "/nonexistent-dir::/bin"}};
  CHECK(RunToCompletion(options) == "found\n");
  options.env.clear();  // default PATH
  CHECK(RunToCompletion(options) == "found\n");
}

TEST_CASE("Spawn: new_session = false keeps the caller's session", "[launcher][process]") {
  SpawnOptions options = Shell("cut -d' ' -f6 /proc/$$/stat");
  options.new_session = false;
  options.parent_death_signal = 0;
  CHECK(RunToCompletion(options) == std::to_string(getsid(0)) + "\n");
}

TEST_CASE("Spawn: failures before exec are errors naming the program", "[launcher][process]") {
  SECTION("absolute path that does not exist") {
    SpawnOptions options;
    options.argv = {"/nonexistent/ds-worker", "--rank=0"};
    StatusOr<Child> child = Spawn(options);
    REQUIRE(!child.ok());
    CHECK(child.status().code() == StatusCode::kNotFound);
    CHECK(child.status().message() == "exec /nonexistent/ds-worker: No such file or directory");
  }
  SECTION("program not in PATH") {
    SpawnOptions options;
    options.argv = {"ds-no-such-program"};
    options.env = {{"PATH", "/usr/bin:/bin"}};
    StatusOr<Child> child = Spawn(options);
    REQUIRE(!child.ok());
    CHECK(child.status().message() == "exec ds-no-such-program: No such file or directory");
  }
  SECTION("file without execute permission") {
    const std::string path = TempDir() + "/not-executable";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    close(fd);
    SpawnOptions options;
    options.argv = {path};
    StatusOr<Child> child = Spawn(options);
    REQUIRE(!child.ok());
    CHECK(child.status().code() == StatusCode::kPermissionDenied);
    CHECK(Contains(child.status().message(), "exec " + path + ": Permission denied"));
  }
  SECTION("bad working directory") {
    SpawnOptions options = Shell("true");
    options.cwd = "/nonexistent-cwd";
    StatusOr<Child> child = Spawn(options);
    REQUIRE(!child.ok());
    CHECK(child.status().message() ==
          "chdir /nonexistent-cwd (for /bin/sh): No such file or directory");
  }
  SECTION("bad arguments") {
    SpawnOptions options;
    CHECK(Spawn(options).status().code() == StatusCode::kInvalidArgument);
    options = Shell("true");
    options.cpus = {-1};
    CHECK(Spawn(options).status().code() == StatusCode::kInvalidArgument);
  }
  // Every failed child was reaped by Spawn: no children are left.
  int status = 0;
  CHECK(waitpid(-1, &status, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

// Forks an intermediate "agent" that spawns two sleepers (one with the death signal, one
// without), reports their pids, and waits. Then SIGKILLs the agent.
TEST_CASE("Spawn: parent death signal kills the worker when the agent dies",
          "[launcher][process]") {
  int report[2];
  REQUIRE(pipe2(report, O_CLOEXEC) == 0);
  const pid_t agent = fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    SpawnOptions with = Shell("exec sleep 300");
    SpawnOptions without = with;
    without.parent_death_signal = 0;
    StatusOr<Child> a = Spawn(with);
    StatusOr<Child> b = Spawn(without);
    pid_t pids[2] = {a.ok() ? a->pid : -1, b.ok() ? b->pid : -1};
    if (write(report[1], pids, sizeof(pids)) != sizeof(pids)) _exit(1);
    for (;;) pause();
  }
  close(report[1]);
  pid_t pids[2] = {-1, -1};
  pollfd pfd{report[0], POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 10000) == 1);
  REQUIRE(read(report[0], pids, sizeof(pids)) == sizeof(pids));
  close(report[0]);
  REQUIRE(pids[0] > 0);
  REQUIRE(pids[1] > 0);
  REQUIRE(IsAlive(pids[0]));

  REQUIRE(kill(agent, SIGKILL) == 0);
  int status = 0;
  REQUIRE(WaitExit(agent, milliseconds(5000), &status));
  CHECK(WaitFor([&] { return !IsAlive(pids[0]); }, milliseconds(2000)));
  // Without the death signal the worker survives its agent; only a sweep finds it.
  std::this_thread::sleep_for(milliseconds(200));
  CHECK(IsAlive(pids[1]));
  CHECK(SweepSession(pids[1], SIGKILL) == 1);
  CHECK(WaitFor([&] { return !IsAlive(pids[1]); }, milliseconds(2000)));
}

}  // namespace
}  // namespace ds::launcher
