#include "launcher/coordinator/status_format.h"

#include <catch2/catch.hpp>

namespace ds::launcher {
namespace {

JobStatus Sample() {
  JobStatus status;
  status.job_id = "llama";
  status.phase = JobPhase::kRestarting;
  status.round = 2;
  status.restarts = 1;
  status.max_restarts = 3;
  status.uptime_ms = 3723000;
  status.nodes = {{"worker-0", "10.0.0.1", 0, AgentState::kRunning, 400, {0, 1}},
                  {"worker-1", "10.0.0.2", 1, AgentState::kLost, 12300, {2, 3}},
                  {"worker-2", "", -1, AgentState::kUnknown, -1, {}}};
  status.ranks = {
      {0, "worker-0", 101, WorkerPhase::kRunning, false, 0, 120, 500, 2.345678, 15000.4, 0},
      {1, "worker-0", 102, WorkerPhase::kStopped, true, 15, 0, 0, 0, 0, 0},
      {2, "worker-1", 201, WorkerPhase::kFailed, false, 3, 119, 500, 2.5, 14000, 0},
      {3, "worker-1", 0, WorkerPhase::kStarting, false, 0, 0, 0, 0, 0, 0}};
  status.first_failure = Failure{2, "worker-1", "exit code 3", {"Traceback", "OOM"}, 0};
  return status;
}

TEST_CASE("FormatJobStatus: header, nodes, ranks and root cause", "[coordinator]") {
  const std::string text = FormatJobStatus(Sample());
  CHECK_THAT(text,
             Catch::StartsWith("job llama  RESTARTING  round 2  restarts 1/3  uptime 1h02m03s\n"));
  CHECK_THAT(text, Catch::Contains("worker-1  10.0.0.2  1          LOST     12.3s ago  2-3"));
  CHECK_THAT(text, Catch::Contains("worker-2  -         -          UNKNOWN  never      -"));
  CHECK_THAT(text,
             Catch::Contains("0     worker-0  101  RUNNING   -          120/500  2.3457  15000"));
  CHECK_THAT(text, Catch::Contains("1     worker-0  102  STOPPED   signal 15  -"));
  CHECK_THAT(text, Catch::Contains("first failure (root cause): rank 2 on worker-1: exit code 3\n"
                                   "  | Traceback\n  | OOM\n"));
}

TEST_CASE("JobStatusToJson: protobuf JSON of ds.proto.JobStatus", "[coordinator]") {
  StatusOr<std::string> json = JobStatusToJson(Sample(), /*pretty=*/false);
  REQUIRE(json.ok());
  CHECK_THAT(*json, Catch::Contains("\"phase\":\"JOB_RESTARTING\""));
  CHECK_THAT(*json, Catch::Contains("\"state\":\"AGENT_LOST\""));
  CHECK_THAT(*json, Catch::Contains("\"cause\":\"exit code 3\""));
  CHECK_THAT(*json, Catch::Contains("\"job_id\":\"llama\""));
  CHECK(FormatRankList({4, 5, 6}) == "4-6");
  CHECK(FormatRankList({1, 3}) == "1, 3");
  CHECK(FormatRankList({}) == "-");
}

}  // namespace
}  // namespace ds::launcher
