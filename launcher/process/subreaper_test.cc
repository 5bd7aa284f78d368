// Subreaper tests: this binary makes itself a child subreaper (per process, sticky), so
// they live apart from supervisor_test.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "launcher/process/recorder.h"
#include "launcher/process/session_sweep.h"
#include "launcher/process/supervisor.h"
#include "launcher/process/test_util.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using testing::IsAlive;
using testing::IsReaped;
using testing::Recorder;
using testing::Shell;
using testing::WaitFor;

constexpr milliseconds kWait{10000};

Child MustSpawn(const std::string& script) {
  StatusOr<Child> child = Spawn(Shell(script));
  REQUIRE(child.ok());
  return *child;
}

TEST_CASE("Subreaper: orphans are re-parented to us and reaped, apart from tracked children",
          "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.EnableSubreaper().ok());
  REQUIRE(sup.Start().ok());
  // The subshell exits at once, orphaning a sleeper that exits 1 s later.
  REQUIRE(sup.Add(0, MustSpawn("(sleep 1 & echo $!); echo ready; exec sleep 300")).ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  const pid_t orphan = std::atoi(rec.Lines(0, false).at(0).c_str());
  internal::ProcStat stat;
  REQUIRE(internal::ReadProcStat(orphan, &stat));
  CHECK(stat.ppid == getpid());
  // Reaped by the supervisor (a zombie of ours would stay in /proc).
  CHECK(WaitFor([&] { return IsReaped(orphan); }, milliseconds(3000)));
  CHECK(rec.Exits(0).empty());
  CHECK(sup.num_tracked() == 1);
  REQUIRE(sup.StopAll(milliseconds(2000)).ok());
  REQUIRE(rec.Exits(0).size() == 1);
  CHECK(rec.Exits(0)[0].signaled);
  CHECK(rec.Exits(0)[0].code_or_signal == SIGTERM);
}

TEST_CASE("Subreaper: StopAll kills a daemon that left the session", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.EnableSubreaper().ok());
  REQUIRE(sup.Start().ok());
  Child child = MustSpawn("setsid sleep 300 & echo $!; echo ready; sleep 300");
  const pid_t sid = child.sid;
  REQUIRE(sup.Add(0, child).ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  const pid_t daemon = std::atoi(rec.Lines(0, false).at(0).c_str());
  REQUIRE(WaitFor([&] { return getsid(daemon) == daemon; }, kWait));
  REQUIRE(sup.StopAll(milliseconds(1000)).ok());
  CHECK(rec.Exits(0).size() == 1);
  CHECK(ProcessesInSession(sid).empty());
  CHECK(WaitFor([&] { return IsReaped(daemon); }, milliseconds(2000)));
}

TEST_CASE("Subreaper: a child reaped as an orphan before Add is still reported",
          "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.EnableSubreaper().ok());
  REQUIRE(sup.Start().ok());
  Child child = MustSpawn("exit 5");
  // The reaper's waitpid(-1) takes it as an untracked child meanwhile.
  REQUIRE(WaitFor([&] { return IsReaped(child.pid); }, kWait));
  REQUIRE(sup.Add(3, child).ok());
  ExitInfo info;
  REQUIRE(rec.WaitExit(3, kWait, &info));
  CHECK(!info.signaled);
  CHECK(info.code_or_signal == 5);
  CHECK(info.pid == child.pid);
  std::this_thread::sleep_for(milliseconds(100));
  CHECK(rec.Exits(3).size() == 1);
}

// The spec's "intermediate agent" shape: a forked agent process is the subreaper; its
// worker double-forks; the agent dies by SIGKILL. The worker (death signal) dies with it.
TEST_CASE("Subreaper: worker with a death signal dies with its agent", "[launcher][process]") {
  // We are a subreaper too, so what outlives the agent is re-parented to us.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int report[2];
  REQUIRE(pipe2(report, O_CLOEXEC) == 0);
  const pid_t agent = fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) _exit(1);
    StatusOr<Child> worker = Spawn(Shell("(sleep 300 &); exec sleep 300"));
    pid_t pid = worker.ok() ? worker->pid : -1;
    if (write(report[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(1);
    for (;;) pause();
  }
  close(report[1]);
  pid_t worker = -1;
  pollfd pfd{report[0], POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 10000) == 1);
  REQUIRE(read(report[0], &worker, sizeof(worker)) == sizeof(worker));
  close(report[0]);
  REQUIRE(worker > 0);
  // The stray is re-parented to the agent (the nearest subreaper), not to us or init.
  pid_t stray = -1;
  REQUIRE(WaitFor(
      [&] {
        for (pid_t pid : ProcessesInSession(worker)) {
          internal::ProcStat stat;
          if (pid != worker && internal::ReadProcStat(pid, &stat) && stat.ppid == agent) {
            stray = pid;
            return true;
          }
        }
        return false;
      },
      kWait));

  REQUIRE(kill(agent, SIGKILL) == 0);
  int status = 0;
  REQUIRE(testing::WaitExit(agent, milliseconds(5000), &status));
  CHECK(WaitFor([&] { return !IsAlive(worker); }, milliseconds(2000)));
  // The stray has no death signal: it survives, re-parented to us, and only the session
  // sweep finds it.
  CHECK(IsAlive(stray));
  CHECK(SweepSession(worker, SIGKILL) == 1);
  CHECK(WaitFor([&] { return !IsAlive(stray); }, milliseconds(2000)));
  // Both were re-parented to this process; reap them.
  waitpid(worker, &status, WNOHANG);
  CHECK(testing::WaitExit(stray, milliseconds(2000), &status));
}

}  // namespace
}  // namespace ds::launcher
