#include "launcher/process/session_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "launcher/process/process.h"
#include "launcher/process/test_util.h"

namespace ds::launcher {
namespace {

using internal::ParseProcStat;
using internal::ProcStat;
using std::chrono::milliseconds;
using testing::IsAlive;
using testing::ReadAll;
using testing::Shell;
using testing::WaitExit;
using testing::WaitFor;

bool Has(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

TEST_CASE("ParseProcStat: fields after the last ')'", "[launcher][process]") {
  ProcStat stat;
  REQUIRE(ParseProcStat("4242 (a) b (c)) S 1 77 99 0 -1 4194560 120\n", &stat));
  CHECK(stat.pid == 4242);
  CHECK(stat.state == 'S');
  CHECK(stat.ppid == 1);
  CHECK(stat.pgrp == 77);
  CHECK(stat.session == 99);
  REQUIRE(ParseProcStat("7 (x) R 0 0 0 0", &stat));
  CHECK(stat.session == 0);
  CHECK(!ParseProcStat("", &stat));
  CHECK(!ParseProcStat("12 (no close paren S 1 2 3", &stat));
  CHECK(!ParseProcStat("12 (x) S 1 2", &stat));
  CHECK(!ParseProcStat("(x) S 1 2 3", &stat));
}

TEST_CASE("ReadProcStat: this process", "[launcher][process]") {
  ProcStat stat;
  REQUIRE(internal::ReadProcStat(getpid(), &stat));
  CHECK(stat.pid == getpid());
  CHECK(stat.ppid == getppid());
  CHECK(stat.pgrp == getpgrp());
  CHECK(stat.session == getsid(0));
  CHECK(Has(ProcessesInSession(getsid(0)), getpid()));
}

TEST_CASE("SweepSession: refuses bad and own sessions", "[launcher][process]") {
  CHECK(SweepSession(0, SIGKILL) == 0);
  CHECK(SweepSession(-5, SIGKILL) == 0);
  CHECK(SweepSession(getsid(0), SIGKILL) == 0);
}

// comm comes from the executable's name; ") S 1 (" in it breaks a parser that reads the
// fields after the first ')'.
TEST_CASE("SweepSession: finds a process whose name holds parentheses", "[launcher][process]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/x) S 1 (y";
  {
    SpawnOptions copy = Shell("cp /bin/sleep \"$0\" && chmod 755 \"$0\"");
    copy.argv.push_back(path);
    StatusOr<Child> cp = Spawn(copy);
    REQUIRE(cp.ok());
    int status = 0;
    REQUIRE(WaitExit(cp->pid, milliseconds(10000), &status));
    CloseChildFds(&*cp);
    REQUIRE(status == 0);
  }
  SpawnOptions options;
  options.argv = {path, "300"};
  StatusOr<Child> child = Spawn(options);
  REQUIRE(child.ok());
  ProcStat stat;
  REQUIRE(internal::ReadProcStat(child->pid, &stat));
  CHECK(stat.session == child->pid);
  CHECK(stat.ppid == getpid());
  CHECK(ProcessesInSession(child->sid) == std::vector<pid_t>{child->pid});
  CHECK(SweepSession(child->sid, SIGKILL) == 1);
  int status = 0;
  REQUIRE(WaitExit(child->pid, milliseconds(5000), &status));
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CloseChildFds(&*child);
  CHECK(ProcessesInSession(child->sid).empty());
}

TEST_CASE("SweepSession: kills a double-forked stray that stayed in the session",
          "[launcher][process]") {
  // The subshell forks the stray and exits: the stray is re-parented, but keeps the session.
  StatusOr<Child> child = Spawn(Shell("(sleep 300 & echo $!); exec sleep 300"));
  REQUIRE(child.ok());
  pollfd pfd{child->stdout_fd, POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 10000) == 1);
  char buf[64] = {};
  REQUIRE(read(child->stdout_fd, buf, sizeof(buf) - 1) > 0);
  const pid_t stray = static_cast<pid_t>(std::atoi(buf));
  REQUIRE(stray > 0);
  REQUIRE(WaitFor([&] { return ProcessesInSession(child->sid).size() == 2; }, milliseconds(5000)));
  const std::vector<pid_t> members = ProcessesInSession(child->sid);
  CHECK(Has(members, child->pid));
  CHECK(Has(members, stray));
  ProcStat stat;
  REQUIRE(internal::ReadProcStat(stray, &stat));
  CHECK(stat.ppid != child->pid);  // orphaned

  CHECK(SweepSession(child->sid, SIGKILL) == 2);
  int status = 0;
  REQUIRE(WaitExit(child->pid, milliseconds(5000), &status));
  CHECK(WIFSIGNALED(status));
  CHECK(WaitFor([&] { return !IsAlive(stray); }, milliseconds(2000)));
  CHECK(ProcessesInSession(child->sid).empty());
  CloseChildFds(&*child);
}

}  // namespace
}  // namespace ds::launcher
