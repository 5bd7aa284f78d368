// CoordinatorServer + CoordinatorClient over real gRPC on 127.0.0.1 (port 0). Agents and
// workers are client threads; every wait is bounded by a deadline.
#include "launcher/coordinator/coordinator_server.h"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/status_format.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kToken[] = "s3cret-token";

CoordinatorOptions Options(std::vector<NodeSpec> nodes) {
  CoordinatorOptions options;
  options.bind_address = "127.0.0.1:0";
  options.token = kToken;
  options.config.nodes = std::move(nodes);
  options.config.join_timeout = seconds(10);
  options.config.last_call = seconds(1);
  options.config.heartbeat_interval = milliseconds(100);
  options.config.node_timeout = seconds(5);
  options.config.success_wait = seconds(10);
  options.config.job.job_id = "grpc-test";
  options.config.job.worker_argv = {"/bin/train", "--steps=10"};
  options.config.job.env = {{"OMP_NUM_THREADS", "1"}};
  options.tick_interval = milliseconds(20);
  return options;
}

std::unique_ptr<CoordinatorServer> StartServer(const CoordinatorOptions& options) {
  StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  REQUIRE(server.ok());
  return std::move(server).value();
}

std::unique_ptr<CoordinatorClient> Connect(const CoordinatorServer& server,
                                           const std::string& token = kToken) {
  ClientOptions options;
  options.address = server.address();
  options.token = token;
  options.rpc_timeout = seconds(5);
  StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

std::future<StatusOr<JoinResult>> AsyncJoin(CoordinatorClient* client, const std::string& node,
                                            int round = 0, milliseconds timeout = seconds(10)) {
  return std::async(std::launch::async, [=] {
    JoinRequest request;
    request.node_name = node;
    request.round = round;
    request.agent_pid = 4242;
    return client->Join(request, timeout);
  });
}

HeartbeatReply Beat(CoordinatorClient* client, const std::string& node, int round) {
  HeartbeatRequest request;
  request.node_name = node;
  request.round = round;
  StatusOr<HeartbeatReply> reply = client->Heartbeat(request);
  REQUIRE(reply.ok());
  return *reply;
}

ExitReport Exit(const std::string& node, int round, int rank, int code) {
  ExitReport report;
  report.node_name = node;
  report.round = round;
  report.rank = rank;
  report.code = code;
  report.pid = 1000 + rank;
  report.last_lines = {"Traceback", "RuntimeError: boom"};
  return report;
}

TEST_CASE("CoordinatorServer: a job from rendezvous to success over gRPC", "[coordinator][grpc]") {
  auto server = StartServer(Options({{"node-a", 2}, {"node-b", 1}}));
  CHECK(server->port() > 0);
  CHECK(server->address() == "127.0.0.1:" + std::to_string(server->port()));
  auto agent_a = Connect(*server);
  auto agent_b = Connect(*server);
  auto launcher = Connect(*server);
  CHECK(launcher->HealthCheck().ok());

  // Watch from the start: it must see PENDING, then RUNNING, and end with SUCCEEDED.
  std::promise<void> first_status;
  auto watch = std::async(std::launch::async, [&] {
    std::vector<JobPhase> phases;
    Status s = launcher->Watch(
        [&](const JobStatus& status) {
          if (phases.empty()) first_status.set_value();
          if (phases.empty() || phases.back() != status.phase) phases.push_back(status.phase);
          return true;
        },
        seconds(20));
    return std::make_pair(s, phases);
  });
  REQUIRE(first_status.get_future().wait_for(seconds(10)) == std::future_status::ready);

  auto join_b = AsyncJoin(agent_b.get(), "node-b");
  auto join_a = AsyncJoin(agent_a.get(), "node-a");
  StatusOr<JoinResult> a = join_a.get();
  StatusOr<JoinResult> b = join_b.get();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->node_rank == 0);
  CHECK(a->global_ranks == std::vector<int>{0, 1});
  CHECK(b->node_rank == 1);
  CHECK(b->global_ranks == std::vector<int>{2});
  CHECK(b->world_size == 3);
  CHECK(b->advertise_addr == "127.0.0.1");  // from the connection
  CHECK(b->job.worker_argv == std::vector<std::string>{"/bin/train", "--steps=10"});
  CHECK(b->job.env.at("OMP_NUM_THREADS") == "1");
  CHECK(b->job.heartbeat_interval_ms == 100);

  HeartbeatRequest beat;
  beat.node_name = "node-a";
  beat.round = 1;
  beat.workers = {{0, 0, 501, WorkerPhase::kRunning}, {1, 1, 502, WorkerPhase::kRunning}};
  StatusOr<HeartbeatReply> reply = agent_a->Heartbeat(beat);
  REQUIRE(reply.ok());
  CHECK(reply->command == AgentCommand::kContinue);
  ProgressReport progress;
  progress.rank = 2;
  progress.step = 7;
  progress.total_steps = 10;
  progress.loss = 1.25;
  progress.tokens_per_s = 900;
  REQUIRE(agent_b->ReportProgress(progress).ok());
  REQUIRE(agent_b->SendLogs("node-b", {LogLine{2, false, "step 7 loss 1.25", 0}}).ok());
  LogChunk logs = server->state().ReadLogs(0, 100, seconds(5));
  REQUIRE(logs.records.size() == 1);
  CHECK(logs.records[0].line.rank == 2);
  CHECK(logs.records[0].line.text == "step 7 loss 1.25");

  StatusOr<JobStatus> status = launcher->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->phase == JobPhase::kRunning);
  CHECK(status->ranks[0].pid == 501);
  CHECK(status->ranks[2].step == 7);
  CHECK(status->nodes[1].advertise_addr == "127.0.0.1");
  CHECK_THAT(FormatJobStatus(*status), Catch::Contains("node-b"));

  for (int rank : {0, 1}) REQUIRE(agent_a->ReportExit(Exit("node-a", 1, rank, 0)).ok());
  REQUIRE(agent_b->ReportExit(Exit("node-b", 1, 2, 0)).ok());
  StatusOr<JobOutcome> end = server->WaitForEnd(seconds(5));
  REQUIRE(end.ok());
  CHECK(end->phase == JobPhase::kSucceeded);
  CHECK(Beat(agent_a.get(), "node-a", 1).command == AgentCommand::kShutdown);
  CHECK(Beat(agent_b.get(), "node-b", 1).command == AgentCommand::kShutdown);
  CHECK(server->state().WaitForShutdownDelivered(seconds(1)));

  auto [watch_status, phases] = watch.get();
  CHECK(watch_status.ok());
  REQUIRE(phases.size() >= 2);
  CHECK(phases.front() == JobPhase::kPending);
  CHECK(phases.back() == JobPhase::kSucceeded);
  StatusOr<std::string> json = JobStatusToJson(*launcher->GetStatus());
  REQUIRE(json.ok());
  CHECK_THAT(*json, Catch::Contains("\"JOB_SUCCEEDED\""));
}

TEST_CASE("CoordinatorServer: calls without the job token are UNAUTHENTICATED",
          "[coordinator][grpc]") {
  auto server = StartServer(Options({{"n", 1}}));
  const std::string prefix = "Status(" + server->address() + "): ";
  for (const std::string& token : {std::string(), std::string("wrong-token"),
                                   std::string(kToken) + "x", std::string(kToken, 5)}) {
    auto intruder = Connect(*server, token);
    StatusOr<JobStatus> status = intruder->GetStatus();
    CHECK(status.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(status.status().message(), Catch::StartsWith(prefix));
    CHECK(intruder->KvSet(0, "k", "v").code() == StatusCode::kUnauthenticated);
    CHECK(intruder->Stop("no").code() == StatusCode::kUnauthenticated);
    JoinRequest join;
    join.node_name = "n";
    CHECK(intruder->Join(join, seconds(2)).status().code() == StatusCode::kUnauthenticated);
    CHECK(intruder->HealthCheck().ok());  // health probes carry no token
  }
  CHECK(server->state().Snapshot().phase == JobPhase::kPending);
  CHECK(Connect(*server)->GetStatus().ok());
  int seen = 0;
  auto stop_after_one = [&](const JobStatus& status) {
    ++seen;
    return false;
  };
  CHECK(Connect(*server)->Watch(stop_after_one, seconds(5)).ok());
  CHECK(seen == 1);
}

TEST_CASE("CoordinatorServer: failure, STOP_WORKERS to all, restart round, Stop",
          "[coordinator][grpc]") {
  CoordinatorOptions options = Options({{"a", 1}, {"b", 1}});
  options.config.max_restarts = 2;
  auto server = StartServer(options);
  auto agent_a = Connect(*server);
  auto agent_b = Connect(*server);
  auto join_a = AsyncJoin(agent_a.get(), "a");
  REQUIRE(AsyncJoin(agent_b.get(), "b").get().ok());
  REQUIRE(join_a.get().ok());
  REQUIRE(agent_a->KvSet(1, "master", "127.0.0.1:29500").ok());

  REQUIRE(agent_b->ReportExit(Exit("b", 1, 1, 3)).ok());
  CHECK(Beat(agent_a.get(), "a", 1).command == AgentCommand::kStopWorkers);
  HeartbeatReply reply = Beat(agent_b.get(), "b", 1);
  CHECK(reply.command == AgentCommand::kStopWorkers);
  CHECK(reply.round == 2);
  StatusOr<JobStatus> status = Connect(*server)->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->phase == JobPhase::kRestarting);
  CHECK(status->restarts == 1);
  REQUIRE(status->first_failure.has_value());
  CHECK(status->first_failure->rank == 1);
  CHECK(status->first_failure->cause == "exit code 3");
  CHECK(status->first_failure->last_lines.back() == "RuntimeError: boom");
  CHECK_THAT(FormatJobStatus(*status), Catch::Contains("first failure (root cause): rank 1 on b"));

  // Joining the old round is refused with the current round; round 2 isolates the KV store.
  JoinRequest old;
  old.node_name = "a";
  old.round = 1;
  StatusOr<JoinResult> refused = agent_a->Join(old, seconds(2));
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("the current round is 2"));
  auto join2 = AsyncJoin(agent_a.get(), "a", 2);
  StatusOr<JoinResult> b2 = AsyncJoin(agent_b.get(), "b", 2).get();
  REQUIRE(b2.ok());
  CHECK(b2->round == 2);
  CHECK(b2->job.resume);
  REQUIRE(join2.get().ok());
  CHECK(agent_a->KvGet(0, "master", milliseconds(0)).status().code() == StatusCode::kNotFound);
  CHECK(agent_a->KvGet(1, "master", milliseconds(0)).status().code() ==
        StatusCode::kFailedPrecondition);

  auto stopper = Connect(*server);
  REQUIRE(stopper->Stop("operator request").ok());
  CHECK(Beat(agent_a.get(), "a", 2).command == AgentCommand::kShutdown);
  StatusOr<JobOutcome> end = server->WaitForEnd(seconds(5));
  REQUIRE(end.ok());
  CHECK(end->phase == JobPhase::kStopped);
  CHECK(end->restarts == 1);
  CHECK(end->message == "stopped: operator request");
}

TEST_CASE("CoordinatorServer: join timeout, client deadline and heartbeat loss",
          "[coordinator][grpc]") {
  SECTION("the join deadline names the missing node") {
    CoordinatorOptions options = Options({{"127.0.0.1", 1}, {"127.0.0.2", 1}});
    options.config.join_timeout = milliseconds(300);
    auto server = StartServer(options);
    auto agent = Connect(*server);
    StatusOr<JoinResult> r = AsyncJoin(agent.get(), "127.0.0.1").get();
    CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
    CHECK(r.status().message() == "Join(" + server->address() +
                                      "): rendezvous round 1: 1/2 nodes joined within 0.3 s, "
                                      "missing: 127.0.0.2");
    CHECK(server->state().Snapshot().phase == JobPhase::kFailed);
  }
  SECTION("a Join whose client gives up leaves the round") {
    auto server = StartServer(Options({{"a", 1}, {"b", 1}}));
    auto agent = Connect(*server);
    StatusOr<JoinResult> r = AsyncJoin(agent.get(), "a", 0, milliseconds(200)).get();
    CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
    for (int i = 0; i < 100 && server->state().Snapshot().nodes[0].state != AgentState::kUnknown;
         ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    CHECK(server->state().Snapshot().nodes[0].state == AgentState::kUnknown);
  }
  SECTION("a node without heartbeats is LOST") {
    CoordinatorOptions options = Options({{"a", 1}, {"b", 1}});
    options.config.node_timeout = milliseconds(300);
    auto server = StartServer(options);
    auto agent_a = Connect(*server);
    auto agent_b = Connect(*server);
    auto join_a = AsyncJoin(agent_a.get(), "a");
    REQUIRE(AsyncJoin(agent_b.get(), "b").get().ok());
    REQUIRE(join_a.get().ok());
    const auto until = std::chrono::steady_clock::now() + seconds(5);
    while (server->state().Snapshot().phase == JobPhase::kRunning &&
           std::chrono::steady_clock::now() < until) {
      Beat(agent_a.get(), "a", 1);
      std::this_thread::sleep_for(milliseconds(50));
    }
    JobStatus status = server->state().Snapshot();
    CHECK(status.phase == JobPhase::kFailed);
    CHECK(status.nodes[1].state == AgentState::kLost);
    REQUIRE(status.first_failure.has_value());
    CHECK(status.first_failure->host == "b");
    CHECK_THAT(status.first_failure->cause, Catch::StartsWith("node lost: no heartbeat for "));
  }
}

TEST_CASE("CoordinatorServer: KV store over gRPC", "[coordinator][grpc][kv]") {
  auto server = StartServer(Options({{"a", 2}}));
  auto rank0 = Connect(*server);
  auto rank1 = Connect(*server);
  auto waiter =
      std::async(std::launch::async, [&] { return rank1->KvGet(0, "nccl_id", seconds(5)); });
  auto all = std::async(std::launch::async, [&] {
    return rank1->KvWait(0, {"nccl_id", "ready/0"}, seconds(5));
  });
  std::this_thread::sleep_for(milliseconds(50));
  std::string binary("\x00\x01\xff id", 6);
  REQUIRE(rank0->KvSet(0, "nccl_id", binary).ok());
  StatusOr<std::string> got = waiter.get();
  REQUIRE(got.ok());
  CHECK(*got == binary);
  REQUIRE(rank0->KvSet(0, "ready/0", "1").ok());
  CHECK(all.get().ok());
  CHECK(rank0->KvAdd(0, "arrived", 1).value() == 1);
  CHECK(rank1->KvAdd(0, "arrived", 1).value() == 2);

  StatusOr<std::string> missing = rank1->KvGet(0, "nope", milliseconds(200));
  CHECK(missing.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(missing.status().message(), Catch::Contains("key 'nope' is not set in round 1"));
  Status waited = rank1->KvWait(0, {"nccl_id", "x", "y"}, milliseconds(200));
  CHECK(waited.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(waited.message(), Catch::EndsWith("missing: x, y"));
  CHECK_THAT(waited.message(), Catch::StartsWith("KvWait(" + server->address() + "): "));
}

TEST_CASE("CoordinatorServer: binding errors and shutdown", "[coordinator][grpc]") {
  auto server = StartServer(Options({{"a", 1}}));
  CoordinatorOptions clash = Options({{"a", 1}});
  clash.bind_address = server->address();
  StatusOr<std::unique_ptr<CoordinatorServer>> second = CoordinatorServer::Start(clash);
  CHECK(second.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(second.status().message(), Catch::Contains(server->address()));
  CoordinatorOptions no_token = Options({{"a", 1}});
  no_token.token.clear();
  CHECK(CoordinatorServer::Start(no_token).status().code() == StatusCode::kInvalidArgument);

  auto agent = Connect(*server);
  auto join = AsyncJoin(agent.get(), "a", 0, seconds(10));
  REQUIRE(join.get().ok());
  auto blocked =
      std::async(std::launch::async, [&] { return agent->KvGet(0, "never", seconds(30)); });
  std::this_thread::sleep_for(milliseconds(50));
  server->Shutdown();
  CHECK(blocked.get().status().code() == StatusCode::kUnavailable);
  CHECK(agent->HealthCheck().code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ds::launcher
