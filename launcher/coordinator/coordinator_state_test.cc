// Pure state tests: a FakeClock drives every protocol timer; blocking Joins run on
// std::async threads, each bounded by a real 10 s caller deadline.
#include "launcher/coordinator/coordinator_state.h"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

WaitOptions Bounded(seconds s = seconds(10)) {
  WaitOptions wait;
  wait.deadline = std::chrono::steady_clock::now() + s;
  return wait;
}

CoordinatorConfig Config(std::vector<NodeSpec> nodes) {
  CoordinatorConfig config;
  config.nodes = std::move(nodes);
  config.join_timeout = seconds(10);
  config.last_call = seconds(5);
  config.heartbeat_interval = seconds(1);
  config.node_timeout = seconds(3);
  config.success_wait = seconds(30);
  config.job.job_id = "test-job";
  config.job.worker_argv = {"/bin/true"};
  return config;
}

std::unique_ptr<CoordinatorState> MakeState(const CoordinatorConfig& config, FakeClock* clock) {
  auto state = CoordinatorState::Create(config, clock);
  REQUIRE(state.ok());
  return std::move(state).value();
}

std::future<StatusOr<JoinResult>> AsyncJoin(CoordinatorState* state, const std::string& node,
                                            int round = 0) {
  return std::async(std::launch::async, [=] {
    JoinRequest request;
    request.node_name = node;
    request.round = round;
    return state->Join(request, Bounded());
  });
}

// Waits (bounded) until `node` has joined the open round.
void AwaitJoined(CoordinatorState* state, const std::string& node) {
  for (int i = 0; i < 1000; ++i) {
    for (const NodeStatus& n : state->Snapshot().nodes) {
      if (n.name == node && n.state == AgentState::kJoining) return;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  FAIL("node " << node << " never joined");
}

// Joins every node of the config (in reverse hostfile order) and returns their results.
std::map<std::string, JoinResult> JoinAll(CoordinatorState* state, int round = 0) {
  std::vector<std::pair<std::string, std::future<StatusOr<JoinResult>>>> joins;
  const auto& nodes = state->config().nodes;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    joins.emplace_back(it->name, AsyncJoin(state, it->name, round));
  }
  std::map<std::string, JoinResult> results;
  for (auto& [name, join] : joins) {
    StatusOr<JoinResult> r = join.get();
    REQUIRE(r.ok());
    results[name] = *r;
  }
  return results;
}

HeartbeatReply Beat(CoordinatorState* state, const std::string& node, int round) {
  HeartbeatRequest request;
  request.node_name = node;
  request.round = round;
  StatusOr<HeartbeatReply> reply = state->Heartbeat(request);
  REQUIRE(reply.ok());
  return *reply;
}

Status Exit(CoordinatorState* state, const std::string& node, int round, int rank, int code,
            bool signaled = false, int64_t exit_ms = 0) {
  ExitReport report;
  report.node_name = node;
  report.round = round;
  report.rank = rank;
  report.code = code;
  report.signaled = signaled;
  report.exit_ms = exit_ms;
  report.last_lines = {"loading", "boom"};
  return state->ReportExit(report);
}

TEST_CASE("CoordinatorState: node rank follows the hostfile, ranks are contiguous blocks",
          "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"c-host", 2}, {"a-host", 3}, {"b-host", 1}}), &clock);
  CHECK(state->Snapshot().phase == JobPhase::kPending);
  std::map<std::string, JoinResult> r = JoinAll(state.get());  // joins b, a, c
  CHECK(r["c-host"].node_rank == 0);
  CHECK(r["c-host"].global_ranks == std::vector<int>{0, 1});
  CHECK(r["a-host"].node_rank == 1);
  CHECK(r["a-host"].global_ranks == std::vector<int>{2, 3, 4});
  CHECK(r["b-host"].node_rank == 2);
  CHECK(r["b-host"].global_ranks == std::vector<int>{5});
  CHECK(r["b-host"].world_size == 6);
  CHECK(r["b-host"].num_nodes == 3);
  CHECK(r["b-host"].round == 1);
  CHECK(r["b-host"].job.job_id == "test-job");
  CHECK_FALSE(r["b-host"].job.resume);
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRunning);
  CHECK(status.ranks.size() == 6);
  CHECK(status.ranks[4].host == "a-host");
  CHECK(status.ranks[4].phase == WorkerPhase::kStarting);

  SECTION("a join for a closed, older or newer round is FailedPrecondition") {
    for (int round : {0, 1, 2}) {
      JoinRequest late;
      late.node_name = "a-host";
      late.round = round;
      StatusOr<JoinResult> result = state->Join(late, Bounded());
      CHECK(result.status().code() == StatusCode::kFailedPrecondition);
      CHECK_THAT(result.status().message(), Catch::Contains("the current round is 1"));
    }
  }
  SECTION("unknown nodes and wrong slot counts are refused") {
    JoinRequest stranger;
    stranger.node_name = "d-host";
    CHECK(state->Join(stranger, Bounded()).status().code() == StatusCode::kNotFound);
    FakeClock clock2;
    auto fresh = MakeState(Config({{"x", 2}}), &clock2);
    JoinRequest wrong;
    wrong.node_name = "x";
    wrong.slots = 4;
    CHECK(fresh->Join(wrong, Bounded()).status().code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("CoordinatorState: join timeout names the missing nodes", "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"127.0.0.1", 1}, {"127.0.0.2", 1}}), &clock);
  auto join = AsyncJoin(state.get(), "127.0.0.1");
  AwaitJoined(state.get(), "127.0.0.1");
  CHECK(state->Snapshot().phase == JobPhase::kRendezvous);
  clock.Advance(seconds(9));
  state->Tick();
  CHECK(join.wait_for(milliseconds(50)) == std::future_status::timeout);
  clock.Advance(seconds(1));
  state->Tick();
  StatusOr<JoinResult> result = join.get();
  CHECK(result.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(result.status().message() ==
        "rendezvous round 1: 1/2 nodes joined within 10.0 s, missing: 127.0.0.2");
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kFailed);
  REQUIRE(status.first_failure.has_value());
  CHECK(status.first_failure->cause == result.status().message());
}

TEST_CASE("CoordinatorState: min_nodes closes after the last call", "[coordinator]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"n0", 2}, {"n1", 2}, {"n2", 2}});
  config.min_nodes = 2;
  auto state = MakeState(config, &clock);
  auto j2 = AsyncJoin(state.get(), "n2");
  AwaitJoined(state.get(), "n2");
  clock.Advance(seconds(4));  // the last call starts only at min_nodes
  auto j0 = AsyncJoin(state.get(), "n0");
  AwaitJoined(state.get(), "n0");
  clock.Advance(seconds(4));
  state->Tick();
  CHECK(j0.wait_for(milliseconds(50)) == std::future_status::timeout);
  clock.Advance(seconds(1));
  state->Tick();
  StatusOr<JoinResult> r0 = j0.get();
  StatusOr<JoinResult> r2 = j2.get();
  REQUIRE(r0.ok());
  REQUIRE(r2.ok());
  CHECK(r0->node_rank == 0);
  CHECK(r0->global_ranks == std::vector<int>{0, 1});
  CHECK(r2->node_rank == 1);
  CHECK(r2->global_ranks == std::vector<int>{2, 3});
  CHECK(r2->world_size == 4);
  JoinRequest late;
  late.node_name = "n1";
  late.round = 1;  // a join of the closed round itself is refused (admission: round 0, below)
  CHECK(state->Join(late, Bounded()).status().code() == StatusCode::kFailedPrecondition);
  CHECK(Beat(state.get(), "n1", 0).command == AgentCommand::kContinue);
}

// An elastic job (min 1 of 2 nodes) running on "a" alone; "b" asks to join.
std::unique_ptr<CoordinatorState> RunningOnA(FakeClock& clock, bool memory_copies) {
  CoordinatorConfig config = Config({{"a", 2}, {"b", 2}});
  config.min_nodes = 1;
  config.memory_copies = memory_copies;
  auto state = MakeState(config, &clock);
  auto ja = AsyncJoin(state.get(), "a");
  AwaitJoined(state.get(), "a");
  clock.Advance(seconds(6));  // past the last call
  state->Tick();
  REQUIRE(ja.get().ok());
  REQUIRE(state->Snapshot().phase == JobPhase::kRunning);
  return state;
}

TEST_CASE("CoordinatorState: with in-memory copies a joining node is admitted at once",
          "[coordinator][elastic]") {
  FakeClock clock;
  auto state = RunningOnA(clock, /*memory_copies=*/true);
  auto jb = AsyncJoin(state.get(), "b");
  AwaitJoined(state.get(), "b");
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRestarting);
  CHECK(status.round == 2);
  CHECK(status.restarts == 0);  // a rescale, not a restart
  CHECK(Beat(state.get(), "a", 1).command == AgentCommand::kStopWorkers);
  CHECK(Exit(state.get(), "a", 1, 0, 15, /*signaled=*/true).ok());  // stopped, not failed
  auto ja = AsyncJoin(state.get(), "a", 2);
  StatusOr<JoinResult> rb = jb.get();
  StatusOr<JoinResult> ra = ja.get();
  REQUIRE(rb.ok());
  REQUIRE(ra.ok());
  CHECK(ra->world_size == 4);
  CHECK(rb->global_ranks == std::vector<int>{2, 3});
  CHECK(ra->job.resume);
  status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRunning);
  CHECK_FALSE(status.first_failure.has_value());
}

TEST_CASE("CoordinatorState: without copies a joining node waits for the next round",
          "[coordinator][elastic]") {
  FakeClock clock;
  auto state = RunningOnA(clock, /*memory_copies=*/false);
  auto jb = AsyncJoin(state.get(), "b");
  AwaitJoined(state.get(), "b");  // shown as joining while it waits
  CHECK(state->Snapshot().phase == JobPhase::kRunning);
  CHECK(state->Snapshot().round == 1);
  CHECK(Beat(state.get(), "a", 1).command == AgentCommand::kContinue);
  CHECK(jb.wait_for(milliseconds(100)) == std::future_status::timeout);
  // A failure without restarts left ends the job; the waiting node's Join ends with it.
  CHECK(Exit(state.get(), "a", 1, 0, 3).ok());
  CHECK(state->Snapshot().phase == JobPhase::kFailed);
  StatusOr<JoinResult> rb = jb.get();
  CHECK(rb.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("CoordinatorState: without copies the waiting node joins the restart round",
          "[coordinator][elastic]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 2}, {"b", 2}});
  config.min_nodes = 1;
  config.max_restarts = 1;
  auto state = MakeState(config, &clock);
  auto ja = AsyncJoin(state.get(), "a");
  AwaitJoined(state.get(), "a");
  clock.Advance(seconds(6));
  state->Tick();
  REQUIRE(ja.get().ok());
  auto jb = AsyncJoin(state.get(), "b");
  AwaitJoined(state.get(), "b");
  CHECK(Exit(state.get(), "a", 1, 1, 3).ok());  // round 2 opens; b joins it
  CHECK(Beat(state.get(), "a", 1).command == AgentCommand::kStopWorkers);
  auto ja2 = AsyncJoin(state.get(), "a", 2);
  StatusOr<JoinResult> rb = jb.get();
  REQUIRE(rb.ok());
  CHECK(rb->round == 2);
  CHECK(rb->world_size == 4);
  REQUIRE(ja2.get().ok());
  CHECK(state->Snapshot().restarts == 1);
}

TEST_CASE("CoordinatorState: a restart round awaits live members past the last call",
          "[coordinator][elastic]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 1}, {"b", 1}, {"c", 1}});
  config.min_nodes = 1;
  config.max_restarts = 1;
  auto state = MakeState(config, &clock);
  JoinAll(state.get());
  CHECK(Exit(state.get(), "a", 1, 0, 3).ok());  // round 2 opens
  auto ja = AsyncJoin(state.get(), "a", 2);
  AwaitJoined(state.get(), "a");
  // b still stops its workers (it heartbeats), c went silent: past the last call (5 s) the
  // round waits for b, and c is lost once silent for node_timeout (3 s).
  for (int i = 0; i < 8; ++i) {
    clock.Advance(seconds(1));
    Beat(state.get(), "a", 1);
    Beat(state.get(), "b", 1);
    state->Tick();
  }
  CHECK(ja.wait_for(milliseconds(50)) == std::future_status::timeout);
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRestarting);
  CHECK(status.nodes[2].state == AgentState::kLost);
  auto jb = AsyncJoin(state.get(), "b", 2);  // closes at once: every node not lost joined
  StatusOr<JoinResult> ra = ja.get();
  REQUIRE(ra.ok());
  CHECK(ra->world_size == 2);
  REQUIRE(jb.get().ok());
}

TEST_CASE("CoordinatorState: a silent node is LOST and fails the job", "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"a", 1}, {"b", 1}}), &clock);
  JoinAll(state.get());
  for (int i = 0; i < 4; ++i) {
    clock.Advance(seconds(1));
    CHECK(Beat(state.get(), "a", 1).command == AgentCommand::kContinue);
    state->Tick();
  }
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kFailed);
  CHECK(status.nodes[1].state == AgentState::kLost);
  CHECK(status.nodes[0].state == AgentState::kRunning);
  REQUIRE(status.first_failure.has_value());
  CHECK(status.first_failure->rank == -1);
  CHECK(status.first_failure->host == "b");
  CHECK(status.first_failure->cause == "node lost: no heartbeat for 4.0 s");
  CHECK(Beat(state.get(), "a", 1).command == AgentCommand::kShutdown);
}

TEST_CASE("CoordinatorState: first failure, STOP_WORKERS and restart rounds", "[coordinator]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 1}, {"b", 1}});
  config.max_restarts = 1;
  auto state = MakeState(config, &clock);
  JoinAll(state.get());
  REQUIRE(state->KvSet(1, "stale", "x").ok());
  CHECK(Exit(state.get(), "b", 1, 1, 3).ok());
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRestarting);
  CHECK(status.round == 2);
  CHECK(status.restarts == 1);
  REQUIRE(status.first_failure.has_value());
  CHECK(status.first_failure->rank == 1);
  CHECK(status.first_failure->host == "b");
  CHECK(status.first_failure->cause == "exit code 3");
  CHECK(status.first_failure->last_lines == std::vector<std::string>{"loading", "boom"});
  HeartbeatReply reply = Beat(state.get(), "a", 1);
  CHECK(reply.command == AgentCommand::kStopWorkers);
  CHECK(reply.round == 2);
  CHECK(Beat(state.get(), "b", 1).command == AgentCommand::kStopWorkers);
  CHECK(Exit(state.get(), "a", 1, 0, 15, /*signaled=*/true).ok());  // stopped by its agent
  status = state->Snapshot();
  CHECK(status.ranks[0].phase == WorkerPhase::kStopped);
  CHECK(status.first_failure->rank == 1);
  // The KV store of round 1 is gone; round 2 starts empty.
  CHECK(state->KvSet(1, "k", "v").code() == StatusCode::kFailedPrecondition);
  CHECK(state->KvGet(0, "stale", milliseconds(0), Bounded()).status().code() ==
        StatusCode::kNotFound);

  std::map<std::string, JoinResult> r = JoinAll(state.get(), 2);
  CHECK(r["a"].round == 2);
  CHECK(r["a"].job.resume);
  CHECK(state->Snapshot().phase == JobPhase::kRunning);
  CHECK(Beat(state.get(), "a", 2).command == AgentCommand::kContinue);
  CHECK(Exit(state.get(), "a", 2, 0, 9, /*signaled=*/true).ok());
  status = state->Snapshot();
  CHECK(status.phase == JobPhase::kFailed);
  CHECK(status.restarts == 1);
  CHECK(status.first_failure->cause == "signal 9 (Killed)");
  CHECK(Beat(state.get(), "b", 2).command == AgentCommand::kShutdown);
  CHECK_FALSE(state->WaitForShutdownDelivered(milliseconds(10)));
  CHECK(Beat(state.get(), "a", 2).command == AgentCommand::kShutdown);
  CHECK(state->WaitForShutdownDelivered(milliseconds(10)));
  StatusOr<JobOutcome> end = state->WaitForEnd(milliseconds(10));
  REQUIRE(end.ok());
  CHECK(end->phase == JobPhase::kFailed);
  CHECK(end->message == "rank 0 on a: signal 9 (Killed)");
}

// A killed rank's peers fail in their collectives at once; their agent may report first. The
// rank whose exit the agents saw first is the root cause, whenever its report arrives, and a
// rank stopped after the failure never is.
TEST_CASE("CoordinatorState: the earliest exit is the first failure, whatever the report order",
          "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"a", 1}, {"b", 1}, {"c", 1}}), &clock);
  JoinAll(state.get());
  CHECK(Exit(state.get(), "a", 1, 0, 1, false, 1000200).ok());  // a peer's collective failed
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kFailed);
  REQUIRE(status.first_failure.has_value());
  CHECK(status.first_failure->rank == 0);
  CHECK(Exit(state.get(), "b", 1, 1, 9, true, 1000000).ok());   // killed 200 ms earlier
  CHECK(Exit(state.get(), "c", 1, 2, 15, true, 1000900).ok());  // stopped after
  status = state->Snapshot();
  CHECK(status.first_failure->rank == 1);
  CHECK(status.first_failure->host == "b");
  CHECK(status.first_failure->cause == "signal 9 (Killed)");
  CHECK(status.ranks[1].phase == WorkerPhase::kFailed);
  CHECK(status.ranks[2].phase == WorkerPhase::kStopped);
  StatusOr<JobOutcome> end = state->WaitForEnd(milliseconds(10));
  REQUIRE(end.ok());
  CHECK(end->first_failure->rank == 1);
  CHECK(end->message == "rank 1 on b: signal 9 (Killed)");
}

TEST_CASE("CoordinatorState: success needs every rank; success_wait bounds it", "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"a", 2}, {"b", 2}}), &clock);
  JoinAll(state.get());
  CHECK(Exit(state.get(), "a", 1, 0, 0).ok());
  CHECK(Exit(state.get(), "a", 1, 1, 0).ok());
  JobStatus status = state->Snapshot();
  CHECK(status.phase == JobPhase::kRunning);
  CHECK(status.nodes[0].state == AgentState::kDone);
  CHECK(state->WaitForEnd(milliseconds(10)).status().code() == StatusCode::kDeadlineExceeded);

  SECTION("all ranks exit 0") {
    CHECK(Exit(state.get(), "b", 1, 2, 0).ok());
    CHECK(Exit(state.get(), "b", 1, 3, 0).ok());
    StatusOr<JobOutcome> end = state->WaitForEnd(milliseconds(10));
    REQUIRE(end.ok());
    CHECK(end->phase == JobPhase::kSucceeded);
    CHECK(end->message == "all 4 ranks exited 0");
    CHECK_FALSE(end->first_failure.has_value());
  }
  SECTION("the others hang past success_wait") {
    CHECK(Exit(state.get(), "b", 1, 3, 0).ok());
    for (int i = 0; i < 30; ++i) {  // keep b alive by heartbeats
      clock.Advance(seconds(1));
      Beat(state.get(), "a", 1);
      Beat(state.get(), "b", 1);
      state->Tick();
    }
    status = state->Snapshot();
    CHECK(status.phase == JobPhase::kFailed);
    REQUIRE(status.first_failure.has_value());
    CHECK(status.first_failure->cause == "still running 30.0 s after a finished: b (ranks 2)");
  }
}

TEST_CASE("CoordinatorState: Stop ends the job and releases waiters", "[coordinator]") {
  FakeClock clock;
  auto state = MakeState(Config({{"a", 1}, {"b", 1}}), &clock);
  auto join = AsyncJoin(state.get(), "a");
  AwaitJoined(state.get(), "a");
  CHECK(state->Stop("user asked").ok());
  StatusOr<JoinResult> result = join.get();
  CHECK(result.status().code() == StatusCode::kAborted);
  CHECK(state->Snapshot().phase == JobPhase::kStopped);
  CHECK(Beat(state.get(), "b", 0).command == AgentCommand::kShutdown);
  StatusOr<JobOutcome> end = state->WaitForEnd(milliseconds(10));
  REQUIRE(end.ok());
  CHECK(end->message == "stopped: user asked");
  CHECK(state->Stop("again").ok());
}

TEST_CASE("CoordinatorState: with job_pending Joins wait for SetJob; the KV store works before",
          "[coordinator]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 1}, {"b", 1}});
  config.job.worker_argv.clear();
  config.job_pending = true;
  auto state = MakeState(config, &clock);
  auto a = AsyncJoin(state.get(), "a");
  auto b = AsyncJoin(state.get(), "b");
  REQUIRE(state->KvSet(0, "links/at/a", "10.0.0.1:7000").ok());  // agents probe before
  CHECK(a.wait_for(milliseconds(300)) == std::future_status::timeout);
  clock.Advance(seconds(30));  // longer than the join window: it opens when the job is set
  state->Tick();
  CHECK(state->Snapshot().phase == JobPhase::kPending);
  JobSpec job;
  job.job_id = "test-job";
  job.worker_argv = {"/bin/true", "--layout"};
  job.env["DS_LAYOUT"] = "tensor=1";
  REQUIRE(state->SetJob(job, {0, 0}).ok());
  StatusOr<JoinResult> ra = a.get(), rb = b.get();
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(ra->job.worker_argv == job.worker_argv);
  CHECK(rb->job.env.at("DS_LAYOUT") == "tensor=1");
  CHECK(ra->job.heartbeat_interval_ms == 1000);
  CHECK(state->SetJob(job, {}).code() == StatusCode::kFailedPrecondition);  // once
}

TEST_CASE("CoordinatorState: a job stopped while pending releases the waiting Joins",
          "[coordinator]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 1}});
  config.job_pending = true;
  auto state = MakeState(config, &clock);
  auto a = AsyncJoin(state.get(), "a");
  CHECK(a.wait_for(milliseconds(100)) == std::future_status::timeout);
  REQUIRE(state->Stop("link probes: node b did not answer").ok());
  StatusOr<JoinResult> r = a.get();
  CHECK(r.status().code() == StatusCode::kFailedPrecondition);
  CHECK(r.status().message().find("link probes: node b did not answer") != std::string::npos);
  CHECK(state->SetJob(JobSpec{}, {}).code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("CoordinatorState: KV store set/get/wait/add and timeouts", "[coordinator][kv]") {
  FakeClock clock;
  auto state = MakeState(Config({{"a", 1}}), &clock);
  REQUIRE(state->KvSet(0, "addr", "10.0.0.1:29500").ok());
  StatusOr<std::string> got = state->KvGet(1, "addr", seconds(1), Bounded());
  REQUIRE(got.ok());
  CHECK(*got == "10.0.0.1:29500");
  CHECK(state->KvAdd(0, "count", 2).value() == 2);
  CHECK(state->KvAdd(0, "count", -5).value() == -3);
  CHECK(state->KvAdd(0, "addr", 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(state->KvGet(2, "addr", seconds(1), Bounded()).status().code() ==
        StatusCode::kFailedPrecondition);

  auto get = std::async(std::launch::async,
                        [&] { return state->KvGet(0, "late", seconds(5), Bounded()); });
  CHECK(get.wait_for(milliseconds(50)) == std::future_status::timeout);
  REQUIRE(state->KvSet(0, "late", "v").ok());
  CHECK(get.get().value() == "v");

  auto wait = std::async(std::launch::async, [&] {
    return state->KvWait(0, {"addr", "x", "y"}, seconds(3), Bounded());
  });
  REQUIRE(state->KvSet(0, "x", "1").ok());
  CHECK(wait.wait_for(milliseconds(50)) == std::future_status::timeout);
  clock.Advance(seconds(3));
  state->Tick();
  Status waited = wait.get();
  CHECK(waited.code() == StatusCode::kDeadlineExceeded);
  CHECK(waited.message() == "1 of 3 keys not set in round 1 after 3.0 s, missing: y");

  auto timed = std::async(std::launch::async,
                          [&] { return state->KvGet(0, "never", seconds(2), Bounded()); });
  std::this_thread::sleep_for(milliseconds(20));
  clock.Advance(seconds(2));
  state->Tick();
  StatusOr<std::string> never = timed.get();
  CHECK(never.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(never.status().message() == "key 'never' is not set in round 1 after 2.0 s");

  WaitOptions short_wait;
  short_wait.deadline = std::chrono::steady_clock::now() + milliseconds(30);
  CHECK(state->KvGet(0, "never", seconds(60), short_wait).status().code() ==
        StatusCode::kDeadlineExceeded);
}

TEST_CASE("CoordinatorState: logs, progress and the change counter", "[coordinator]") {
  FakeClock clock;
  CoordinatorConfig config = Config({{"a", 2}});
  config.log_capacity_lines = 3;
  auto state = MakeState(config, &clock);
  JoinAll(state.get());
  uint64_t version = 0;
  state->Snapshot(&version);
  auto change =
      std::async(std::launch::async, [&] { return state->WaitForChange(version, Bounded()); });
  ProgressReport progress;
  progress.rank = 1;
  progress.step = 10;
  progress.total_steps = 100;
  progress.loss = 2.5;
  REQUIRE(state->ReportProgress(progress).ok());
  CHECK(change.get().value() > version);
  JobStatus status = state->Snapshot();
  CHECK(status.ranks[1].step == 10);
  CHECK(status.ranks[1].phase == WorkerPhase::kRunning);

  std::vector<LogLine> lines;
  for (int i = 0; i < 5; ++i)
    lines.push_back(LogLine{i % 2, false, "line " + std::to_string(i), 0});
  REQUIRE(state->AppendLogs("a", lines).ok());
  LogChunk chunk = state->ReadLogs(0, 10, milliseconds(0));
  CHECK(chunk.dropped == 2);
  REQUIRE(chunk.records.size() == 3);
  CHECK(chunk.records[0].line.text == "line 2");
  CHECK(chunk.records[0].node == "a");
  CHECK(chunk.next_cursor == 5);
  CHECK(state->ReadLogs(5, 10, milliseconds(10)).records.empty());
  CHECK(state->AppendLogs("zz", lines).code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace ds::launcher
