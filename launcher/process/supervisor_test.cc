#include "launcher/process/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/process/recorder.h"
#include "launcher/process/session_sweep.h"
#include "launcher/process/test_util.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using testing::IsAlive;
using testing::Recorder;
using testing::Shell;
using testing::WaitFor;
using Strings = std::vector<std::string>;

constexpr milliseconds kWait{10000};

Child MustSpawn(const std::string& script) {
  StatusOr<Child> child = Spawn(Shell(script));
  REQUIRE(child.ok());
  return *child;
}

// Polls `sup` (no thread) until `done` or the bound.
bool PollUntil(Supervisor& sup, const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    REQUIRE(sup.Poll(milliseconds(20)).ok());
  }
  return true;
}

TEST_CASE("Supervisor: output split into lines on both streams", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  REQUIRE(sup.Add(7, MustSpawn("printf par; sleep 0.2; printf 'tial\\nsecond\\n'; "
                               "printf 'e1\\ne2' >&2; head -c 70000 /dev/zero | tr '\\0' x; "
                               "echo; printf no-newline"))
              .ok());
  ExitInfo info;
  REQUIRE(rec.WaitExit(7, kWait, &info));
  const Strings out = rec.Lines(7, false);
  REQUIRE(out.size() == 5);
  CHECK(out[0] == "partial");
  CHECK(out[1] == "second");
  CHECK(out[2] == std::string(65536, 'x'));
  CHECK(out[3] == std::string(70000 - 65536, 'x'));
  CHECK(out[4] == "no-newline");
  CHECK(rec.Lines(7, true) == Strings{"e1", "e2"});
  CHECK(!info.signaled);
  CHECK(info.code_or_signal == 0);
  // Both streams, each in order; their interleaving depends on scheduling.
  REQUIRE(info.last_lines.size() == 7);
  Strings tail_out, tail_err;
  for (const std::string& line : info.last_lines) {
    (line.size() == 2 && line[0] == 'e' ? tail_err : tail_out).push_back(line);
  }
  CHECK(tail_out == out);
  CHECK(tail_err == Strings{"e1", "e2"});
  CHECK(sup.num_tracked() == 0);
}

TEST_CASE("Supervisor: exit codes and signals, reported exactly once", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());  // explicit Poll(), no thread
  REQUIRE(sup.Add(0, MustSpawn("exit 3")).ok());
  REQUIRE(sup.Add(1, MustSpawn("echo dying >&2; kill -9 $$")).ok());
  REQUIRE(PollUntil(
      sup, [&] { return sup.num_tracked() == 0; }, kWait));
  for (int i = 0; i < 5; ++i) REQUIRE(sup.Poll(milliseconds(10)).ok());
  REQUIRE(rec.Exits(0).size() == 1);
  REQUIRE(rec.Exits(1).size() == 1);
  const ExitInfo code = rec.Exits(0)[0];
  CHECK(!code.signaled);
  CHECK(code.code_or_signal == 3);
  CHECK(code.ToString() == "exit code 3");
  const ExitInfo sig = rec.Exits(1)[0];
  CHECK(sig.signaled);
  CHECK(sig.code_or_signal == SIGKILL);
  CHECK(sig.ToString() == "signal 9 (SIGKILL)");
  CHECK(sig.last_lines == Strings{"dying"});
}

// The agent reports exits one at a time (an RPC each), so the time of an exit must be taken
// when it is reaped: a slow report of the first exit must not make the second look later.
TEST_CASE("Supervisor: exit time is when the child was reaped, not when reported",
          "[launcher][process]") {
  std::mutex mu;
  std::map<int, int64_t> seen;
  Supervisor sup(nullptr, [&](int id, ExitInfo info) {
    std::this_thread::sleep_for(milliseconds(300));  // a slow ReportExit
    std::lock_guard<std::mutex> lock(mu);
    seen[id] = info.exit_ms;
  });
  const Child a = MustSpawn("exit 1"), b = MustSpawn("exit 2");
  for (pid_t pid : {a.pid, b.pid}) {  // both exited before the supervisor looks
    siginfo_t si{};
    REQUIRE(WaitFor(
        [&] {
          return waitid(P_PID, pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
        },
        kWait));
  }
  const int64_t before =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  REQUIRE(sup.Add(0, a).ok());
  REQUIRE(sup.Add(1, b).ok());
  REQUIRE(PollUntil(
      sup, [&] { return sup.num_tracked() == 0; }, kWait));
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] >= before);
  CHECK(seen[1] >= before);
  CHECK(std::abs(seen[0] - seen[1]) < 250);  // reaped together; delivered 300 ms apart
}

TEST_CASE("Supervisor: keeps the last 50 lines", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  REQUIRE(sup.Add(0, MustSpawn("for i in $(seq 1 120); do echo line$i; done; echo ready; "
                               "exec sleep 30"))
              .ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  Strings tail = sup.LastLines(0);
  REQUIRE(tail.size() == Supervisor::kTailLines);
  CHECK(tail.front() == "line72");
  CHECK(tail.back() == "ready");
  CHECK(sup.LastLines(99).empty());
  REQUIRE(sup.StopAll(milliseconds(5000)).ok());
  ExitInfo info;
  REQUIRE(rec.WaitExit(0, milliseconds(0), &info));
  CHECK(info.signaled);
  CHECK(info.code_or_signal == SIGTERM);
  CHECK(info.last_lines == tail);
  CHECK(rec.Lines(0, false).size() == 121);
}

TEST_CASE("Supervisor: StopAll SIGKILLs a child that ignores SIGTERM after the grace",
          "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  REQUIRE(sup.Add(0, MustSpawn("trap '' TERM; echo ready; sleep 30")).ok());
  REQUIRE(sup.Add(1, MustSpawn("echo ready; exec sleep 30")).ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  REQUIRE(rec.WaitLine(1, "ready", kWait));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(sup.StopAll(milliseconds(300)).ok());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed >= milliseconds(300));
  CHECK(elapsed < milliseconds(3000));
  REQUIRE(rec.Exits(0).size() == 1);
  CHECK(rec.Exits(0)[0].signaled);
  CHECK(rec.Exits(0)[0].code_or_signal == SIGKILL);
  REQUIRE(rec.Exits(1).size() == 1);
  CHECK(rec.Exits(1)[0].code_or_signal == SIGTERM);
  CHECK(sup.num_tracked() == 0);
}

TEST_CASE("Supervisor: StopAll leaves nothing in the worker's session", "[launcher][process]") {
  // `(sleep 300 &)` orphans the sleeper but keeps it in the session and, without job
  // control, in the worker's process group. The perl variant also moves it to a process
  // group of its own, so only the session sweep can find it.
  const bool own_group = GENERATE(false, true);
  const std::string script =
      own_group ? "(perl -e 'setpgrp(0, 0); exec qw(sleep 300)' & echo $!); echo ready; sleep 300"
                : "(sleep 300 & echo $!); echo ready; sleep 300";
  INFO(script);
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  Child child = MustSpawn(script);
  const pid_t sid = child.sid;
  REQUIRE(sup.Add(0, child).ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  const pid_t stray = std::atoi(rec.Lines(0, false).at(0).c_str());
  REQUIRE(IsAlive(stray));
  REQUIRE(WaitFor([&] { return getpgid(stray) == (own_group ? stray : sid); }, kWait));
  CHECK(getsid(stray) == sid);
  REQUIRE(sup.StopAll(milliseconds(1000)).ok());
  CHECK(rec.Exits(0).size() == 1);
  CHECK(WaitFor([&] { return !IsAlive(stray); }, milliseconds(2000)));
  CHECK(ProcessesInSession(sid).empty());
}

TEST_CASE("Supervisor: a daemon that left the session escapes the sweep", "[launcher][process]") {
  // Without subreaper (see subreaper_test) nothing but the daemon's own session finds it:
  // setsid(1) made a new session. Documented limitation; a cgroup would catch it.
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  Child child = MustSpawn("setsid sleep 300 & echo $!; echo ready; sleep 300");
  const pid_t sid = child.sid;
  REQUIRE(sup.Add(0, child).ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  const pid_t daemon = std::atoi(rec.Lines(0, false).at(0).c_str());
  REQUIRE(WaitFor([&] { return getsid(daemon) == daemon; }, kWait));
  REQUIRE(sup.StopAll(milliseconds(1000)).ok());
  CHECK(ProcessesInSession(sid).empty());
  CHECK(IsAlive(daemon));
  CHECK(SweepSession(daemon, SIGKILL) == 1);
  CHECK(WaitFor([&] { return !IsAlive(daemon); }, milliseconds(2000)));
}

TEST_CASE("Supervisor: exit is reported while a descendant holds the pipes",
          "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  Child child = MustSpawn("sleep 300 & echo bye; exit 4");
  const pid_t sid = child.sid;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(sup.Add(0, child).ok());
  ExitInfo info;
  REQUIRE(rec.WaitExit(0, kWait, &info));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
  CHECK(info.code_or_signal == 4);
  CHECK(info.last_lines == Strings{"bye"});
  // The sleeper is left in the dead worker's session; the next StopAll sweeps it.
  REQUIRE(ProcessesInSession(sid).size() == 1);
  REQUIRE(sup.StopAll(milliseconds(100)).ok());
  CHECK(WaitFor([&] { return ProcessesInSession(sid).empty(); }, milliseconds(2000)));
}

TEST_CASE("Supervisor: ForwardSignal reaches the group", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Start().ok());
  REQUIRE(sup.Add(0, MustSpawn("trap 'echo got USR1; exit 7' USR1; echo ready; "
                               "while :; do sleep 0.05; done"))
              .ok());
  REQUIRE(rec.WaitLine(0, "ready", kWait));
  CHECK(sup.ForwardSignal(SIGUSR1) == 1);
  ExitInfo info;
  REQUIRE(rec.WaitExit(0, kWait, &info));
  CHECK(info.code_or_signal == 7);
  // The shell also reports the foreground sleep's death on stderr; stdout ends with:
  CHECK(rec.Lines(0, false).back() == "got USR1");
  CHECK(sup.ForwardSignal(SIGUSR1) == 0);
}

TEST_CASE("Supervisor: Add rejects duplicates and bad children", "[launcher][process]") {
  Recorder rec;
  Supervisor sup(rec.log(), rec.exit());
  REQUIRE(sup.Add(0, MustSpawn("exec sleep 30")).ok());
  Child second = MustSpawn("exec sleep 30");
  CHECK(sup.Add(0, second).code() == StatusCode::kAlreadyExists);
  CHECK(sup.Add(1, Child{}).code() == StatusCode::kInvalidArgument);
  REQUIRE(sup.Add(1, second).ok());
  CHECK(sup.num_tracked() == 2);
  CHECK(sup.Start().ok());
  CHECK(sup.Start().code() == StatusCode::kFailedPrecondition);
  CHECK(WaitFor([] { return testing::HasThreadNamed("ds-reaper"); }, kWait));
  CHECK(sup.Poll(milliseconds(1)).code() == StatusCode::kFailedPrecondition);
  REQUIRE(sup.StopAll(milliseconds(2000)).ok());
  CHECK(rec.Exits(0).size() == 1);
  CHECK(rec.Exits(1).size() == 1);
}

TEST_CASE("Supervisor: StopAll from the exit callback", "[launcher][process]") {
  Recorder rec;
  Supervisor* sup_ptr = nullptr;
  Status stop_status = InternalError("not called");
  auto on_exit = [&, record = rec.exit()](int id, ExitInfo info) {
    const bool first_failure = id == 0;
    record(id, std::move(info));
    if (first_failure) stop_status = sup_ptr->StopAll(milliseconds(2000));  // reentrant
  };
  Supervisor sup(rec.log(), on_exit);
  sup_ptr = &sup;
  REQUIRE(sup.Start().ok());
  REQUIRE(sup.Add(1, MustSpawn("echo ready; exec sleep 30")).ok());
  REQUIRE(rec.WaitLine(1, "ready", kWait));
  REQUIRE(sup.Add(0, MustSpawn("exit 1")).ok());
  ExitInfo info;
  REQUIRE(rec.WaitExit(1, kWait, &info));
  CHECK(info.code_or_signal == SIGTERM);
  CHECK(rec.Exits(0).size() == 1);
  CHECK(rec.Exits(1).size() == 1);
  CHECK(WaitFor([&] { return stop_status.ok(); }, kWait));
}

TEST_CASE("Supervisor: destructor kills and reaps what is left", "[launcher][process]") {
  Recorder rec;
  pid_t pid = -1;
  {
    Supervisor sup(rec.log(), rec.exit());
    REQUIRE(sup.Start().ok());
    Child child = MustSpawn("exec sleep 300");
    pid = child.pid;
    REQUIRE(sup.Add(0, child).ok());
  }
  CHECK(testing::IsReaped(pid));
  CHECK(rec.Exits(0).empty());  // no callbacks from the destructor
}

}  // namespace
}  // namespace ds::launcher
