// Hang diagnosis: HangWatch's deadline and verdict from positions and step times, and the
// coordinator's path from a silent job to a failure naming the rank, its instruction and group,
// with the stacks its agent captured. A FakeClock drives every timer.
#include "launcher/coordinator/hang.h"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "launcher/coordinator/coordinator_state.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

PlanPosition At(int64_t step, int instruction, const std::string& kind,
                const std::string& group = "", int64_t bytes = 0) {
  return PlanPosition{step, instruction, kind, group, bytes};
}

// Four ranks finish steps first..last, one every `step`, each report at the step's end.
void Steps(HangWatch* watch, SteadyTime* now, int first, int last, milliseconds step) {
  for (int s = first; s <= last; ++s) {
    *now += step;
    for (int r = 0; r < 4; ++r) watch->Report(r, At(s + 1, 0, "LOAD"), s, *now);
  }
}

TEST_CASE("HangWatch: the auto deadline follows the p99 step time, clamped",
          "[coordinator][hang]") {
  HangOptions o;  // auto: 5 x p99 after 3 warm-up steps, [10 s, 600 s]
  HangWatch watch(o, 4);
  SteadyTime now{};
  CHECK(watch.Deadline() == seconds(600));  // nothing measured: the ceiling
  CHECK_THAT(watch.DeadlineText(), Catch::Contains("the ceiling until 4 steps are measured"));
  Steps(&watch, &now, 1, 3, seconds(30));  // warm-up: slow, not measured
  CHECK(!watch.measured());
  Steps(&watch, &now, 4, 13, seconds(3));
  CHECK(watch.measured());
  CHECK(watch.Deadline() == seconds(15));  // 5 x 3 s
  Steps(&watch, &now, 14, 23, milliseconds(100));
  CHECK(watch.Deadline() == seconds(15));  // the p99 of 20 steps is still a 3 s one
  HangWatch fast(o, 4);
  SteadyTime t{};
  Steps(&fast, &t, 1, 20, milliseconds(100));
  CHECK(fast.Deadline() == seconds(10));  // 0.5 s, floored
  CHECK_THAT(fast.DeadlineText(), Catch::Contains("= 0.50 s, the floor"));
  o.fixed = seconds(42);
  CHECK(HangWatch(o, 4).Deadline() == seconds(42));
  CHECK(DescribeHangOptions(o) == "42.0 s");
}

TEST_CASE("HangWatch: the rank furthest behind is named with where the others wait",
          "[coordinator][hang]") {
  HangWatch watch(HangOptions{}, 4);
  SteadyTime now{};
  Steps(&watch, &now, 1, 20, milliseconds(200));  // deadline 10 s
  now += milliseconds(100);
  for (int r : {0, 1, 3}) watch.Report(r, At(22, 14, "REDUCE_SCATTER", "dp", 4 << 20), 21, now);
  watch.Report(2, At(22, 7, "FORWARD"), 21, now);
  CHECK(!watch.Hung(now + seconds(10)));
  CHECK(watch.Hung(now + seconds(11)));
  CHECK(watch.StuckRanks(now + seconds(11)) == std::vector<int>{2});
  const std::string text = watch.Diagnose(now + seconds(11), {"a", "a", "b", "b"});
  INFO(text);
  CHECK_THAT(text, Catch::Contains("no rank moved for 11.0 s (deadline 10.0 s"));
  CHECK_THAT(text, Catch::Contains("rank 2 on b stands at step 22, instruction 7 FORWARD"));
  CHECK_THAT(text, Catch::Contains("ranks 0, 1, 3 wait at step 22, instruction 14 REDUCE_SCATTER "
                                   "on group dp (4.00 MiB)"));
  // A rank between steps (validation, a checkpoint) is given the maximum, not the step deadline.
  {
    HangWatch between(HangOptions{}, 2);
    SteadyTime t{};
    for (int s = 1; s <= 20; ++s) {
      t += milliseconds(200);
      for (int r = 0; r < 2; ++r) between.Report(r, At(s + 1, 0, "LOAD"), s, t);
    }
    between.Report(0, At(21, -1, "checkpoint"), 20, t);
    between.Report(1, At(21, -1, "checkpoint"), 20, t);
    CHECK(!between.Hung(t + seconds(60)));
    CHECK(between.Hung(t + seconds(601)));
  }
  // One rank moving resets the silence.
  watch.Report(0, At(22, 15, "ALL_GATHER", "dp"), 21, now + seconds(5));
  CHECK(!watch.Hung(now + seconds(11)));
  // Every rank at one place: all of them are named.
  HangWatch same(HangOptions{}, 2);
  same.Report(0, At(3, 9, "ALL_REDUCE", "world"), 2, now);
  same.Report(1, At(3, 9, "ALL_REDUCE", "world"), 2, now);
  CHECK(same.StuckRanks(now) == std::vector<int>{0, 1});
  CHECK_THAT(
      same.Diagnose(now + seconds(700), {}),
      Catch::Contains("every rank stands at step 3, instruction 9 ALL_REDUCE on group world"));
  // A pipeline: indexes are compared within a stage only. Stage 1's rank 3 is behind rank 2;
  // stage 0's ranks stand at a smaller index, waiting for stage 1: not named.
  HangOptions piped;
  piped.streams = {0, 0, 1, 1};
  HangWatch pipe(piped, 4);
  pipe.Report(0, At(5, 9, "RECV", "pipe.2-0"), 4, now);
  pipe.Report(1, At(5, 9, "RECV", "pipe.3-1"), 4, now);
  pipe.Report(2, At(5, 20, "SEND", "pipe.2-0"), 4, now);
  pipe.Report(3, At(5, 12, "FORWARD"), 4, now);
  CHECK(pipe.StuckRanks(now) == std::vector<int>{3});
  // One rank per stage: nobody is behind a peer; every rank is listed where it stands.
  HangOptions two;
  two.streams = {0, 1};
  HangWatch pp2(two, 2);
  pp2.Report(0, At(5, 9, "RECV", "pipe.1-0"), 4, now);
  pp2.Report(1, At(5, 4, "FORWARD"), 4, now);
  CHECK(pp2.StuckRanks(now) == std::vector<int>{0, 1});
  CHECK_THAT(pp2.Diagnose(now + seconds(700), {"a", "b"}),
             Catch::Contains("no rank is behind the others of its stage: rank 0 on a at step 5, "
                             "instruction 9 RECV on group pipe.1-0; rank 1 on b at step 5, "
                             "instruction 4 FORWARD"));
  // A stopped rank sends nothing while the others report where they wait: it is the one named.
  for (int i = 1; i <= 20; ++i)
    same.Report(0, At(3, 9, "ALL_REDUCE", "world"), 2, now + seconds(i));
  CHECK(same.StuckRanks(now + seconds(20)) == std::vector<int>{1});
  CHECK_THAT(same.Diagnose(now + seconds(700), {"a", "b"}),
             Catch::Contains("rank 1 on b stands at step 3, instruction 9 ALL_REDUCE on group "
                             "world for 700.0 s and sent no report for 700.0 s (stopped?)") &&
                 Catch::Contains("rank 0 waits at step 3, instruction 9 ALL_REDUCE"));
}

CoordinatorConfig TwoNodes() {
  CoordinatorConfig config;
  config.nodes = {{"a", 2}, {"b", 2}};
  config.join_timeout = seconds(10);
  config.last_call = seconds(5);
  config.heartbeat_interval = seconds(1);
  config.node_timeout = seconds(3600);
  config.stack_wait = seconds(20);
  config.job.job_id = "hang-job";
  config.job.worker_argv = {"/bin/true"};
  config.hang.floor = seconds(10);
  return config;
}

void Progress(CoordinatorState* state, int rank, int64_t steps, const PlanPosition& at) {
  ProgressReport r;
  r.rank = rank;
  r.round = 1;
  r.step = steps;
  r.total_steps = 100;
  r.position = at;
  REQUIRE(state->ReportProgress(r).ok());
}

HeartbeatReply Beat(CoordinatorState* state, const std::string& node) {
  HeartbeatRequest request;
  request.node_name = node;
  request.round = 1;
  auto reply = state->Heartbeat(request);
  REQUIRE(reply.ok());
  return *reply;
}

TEST_CASE("CoordinatorState: a hang ends the round naming the rank, with its stacks",
          "[coordinator][hang]") {
  FakeClock clock;
  auto made = CoordinatorState::Create(TwoNodes(), &clock);
  REQUIRE(made.ok());
  CoordinatorState* state = made->get();
  std::vector<std::future<StatusOr<JoinResult>>> joins;
  for (const char* node : {"a", "b"})
    joins.push_back(std::async(std::launch::async, [state, node] {
      JoinRequest request;
      request.node_name = node;
      WaitOptions wait;
      wait.deadline = std::chrono::steady_clock::now() + seconds(10);
      return state->Join(request, wait);
    }));
  for (auto& j : joins) REQUIRE(j.get().ok());
  REQUIRE(state->Snapshot().phase == JobPhase::kRunning);
  for (int s = 1; s <= 10; ++s) {
    clock.Advance(milliseconds(200));
    for (int r = 0; r < 4; ++r) Progress(state, r, s, At(s + 1, 0, "LOAD"));
  }
  for (int r : {0, 1, 2}) Progress(state, r, 10, At(11, 12, "ALL_REDUCE", "dp", 1 << 20));
  Progress(state, 3, 10, At(11, 4, "FORWARD"));
  clock.Advance(seconds(9));
  state->Tick();
  CHECK(Beat(state, "b").command == AgentCommand::kContinue);
  const JobStatus status = state->Snapshot();
  REQUIRE(status.ranks[3].position);
  CHECK(status.ranks[3].position->kind == "FORWARD");
  CHECK(status.ranks[3].position_age_ms == 9000);
  clock.Advance(seconds(2));  // 11 s without a move: past the floor
  state->Tick();
  CHECK(Beat(state, "a").command == AgentCommand::kContinue);  // rank 3 runs on b
  HeartbeatReply b = Beat(state, "b");
  CHECK(b.command == AgentCommand::kDumpStacks);
  CHECK(b.dump_ranks == std::vector<int>{3});
  CHECK(Beat(state, "b").command == AgentCommand::kContinue);  // asked once
  REQUIRE(state->ReportStacks({"b", 1, 3, "Thread 1 (LWP 42):\n#0 nanosleep\n#1 Forward"}).ok());
  state->Tick();
  const JobStatus end = state->Snapshot();
  CHECK(end.phase == JobPhase::kFailed);
  REQUIRE(end.first_failure);
  CHECK(end.first_failure->rank == 3);
  CHECK(end.first_failure->host == "b");
  CHECK_THAT(end.first_failure->cause,
             Catch::Contains("rank 3 on b stands at step 11, instruction 4 FORWARD") &&
                 Catch::Contains("ranks 0, 1, 2 wait at step 11, instruction 12 ALL_REDUCE on "
                                 "group dp"));
  REQUIRE(end.first_failure->last_lines.size() == 4);
  CHECK(end.first_failure->last_lines[0] == "rank 3 threads:");
  CHECK(end.first_failure->last_lines[3] == "  #1 Forward");
}

}  // namespace
}  // namespace ds::launcher
