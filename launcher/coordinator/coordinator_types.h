// Plain C++ types of the coordinator's control plane: the messages of
// proto/coordinator.proto without their generated code, so that launcher/ and runtime/
// headers stay free of protobuf and gRPC. Enum values equal the proto's numbers (a cast
// converts); proto_convert.h does the field-by-field conversion inside this package.
// Plain data: no thread-safety concerns.
//
//   JoinRequest join;
//   join.node_name = "worker-0";
//   join.slots = 8;
//   DS_ASSIGN_OR_RETURN(JoinResult rdzv, client->Join(join, std::chrono::seconds(600)));
//   // rdzv.global_ranks[local_rank] is each local worker's RANK
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ds::launcher {

enum class JobPhase : int {
  kPending = 0,     // no agent joined yet
  kRendezvous = 1,  // round 1 open
  kRunning = 2,
  kRestarting = 3,  // a failure with restarts left: agents stop workers, round r+1 open
  kSucceeded = 4,
  kFailed = 5,
  kStopped = 6,  // Stop() was called
};

enum class AgentState : int { kUnknown = 0, kJoining = 1, kRunning = 2, kDone = 3, kLost = 4 };

enum class WorkerPhase : int {
  kUnknown = 0,
  kStarting = 1,
  kRunning = 2,
  kSucceeded = 3,
  kFailed = 4,
  kStopped = 5,
};

enum class AgentCommand : int { kContinue = 0, kStopWorkers = 1, kShutdown = 2, kDumpStacks = 3 };

// Upper-case names as in the proto without the prefix: "RUNNING", "LOST", "STOP_WORKERS".
const char* JobPhaseName(JobPhase phase);
const char* AgentStateName(AgentState state);
const char* WorkerPhaseName(WorkerPhase phase);
const char* AgentCommandName(AgentCommand command);
// SUCCEEDED, FAILED and STOPPED: the job is over.
bool IsTerminal(JobPhase phase);

// One hostfile line: node rank order is the order of these entries.
struct NodeSpec {
  std::string name;  // as the hostfile names it; agents join with this name
  int slots = 0;     // local ranks; 0 = take the agent's count
  // The hostfile slots (GPU indices) its ranks use when --include picked some; empty = 0..slots-1.
  std::vector<int> devices;
};

struct JobSpec {
  std::string job_id;
  std::vector<std::string> worker_argv;    // program and arguments of every rank
  std::map<std::string, std::string> env;  // extra environment of every worker
  bool resume = false;                     // set by the coordinator in rounds > 1
  int grace_ms = 10000;                    // SIGTERM -> SIGKILL when stopping workers
  int heartbeat_interval_ms = 0;           // set by the coordinator
};

// A complete in-memory copy an agent's state store holds (fault_tolerance.in_memory_interval).
struct StoredCopy {
  int rank = 0;
  int64_t step = 0;
};

struct JoinRequest {
  std::string node_name;
  std::string advertise_addr;  // "" = the source address of the agent's connection
  int slots = 0;
  int round = 0;  // 0 = the open round
  int64_t agent_pid = 0;
  int state_store_port = 0;  // this agent's state store; 0 = none
  std::vector<StoredCopy> held_copies;
};

struct JoinResult {
  int round = 0;
  int node_rank = 0;
  int num_nodes = 0;
  int world_size = 0;
  std::vector<int> global_ranks;  // of this node's local ranks, in local-rank order
  JobSpec job;
  std::string advertise_addr;  // what the coordinator recorded for this node
  // In-memory copies (memory_copies.h): where this node's ranks send theirs (host:port, its own
  // store first); on a restart the step to resume from (0 = none) and each local rank's source.
  std::vector<std::string> copy_stores;
  int64_t memory_step = 0;
  int memory_world = 0;  // the copies' world; != world_size: memory_sources holds every old rank's
  std::vector<std::string> memory_sources;
};

struct WorkerReport {
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  WorkerPhase phase = WorkerPhase::kUnknown;
};

struct HeartbeatRequest {
  std::string node_name;
  int round = 0;  // the round the agent's workers run in; 0 = not joined yet
  std::vector<WorkerReport> workers;
};

struct HeartbeatReply {
  int round = 0;  // the coordinator's current round
  AgentCommand command = AgentCommand::kContinue;
  std::vector<int> dump_ranks;  // kDumpStacks: this node's ranks whose stacks to capture
};

struct StackReport {
  std::string node_name;
  int round = 0;
  int rank = 0;
  std::string text;  // every thread's stack, or why none could be captured
};

// Where a rank is in its plan (PlanPosition in the proto).
struct PlanPosition {
  int64_t step = 0;      // from 1; 0: before the first
  int instruction = -1;  // index in the rank's stream; -1: outside a step
  std::string kind;      // instruction kind name, or what the rank does outside a step
  std::string group;     // a collective's process group
  int64_t bytes = 0;     // a collective's payload
  bool operator==(const PlanPosition& o) const {
    return step == o.step && instruction == o.instruction && kind == o.kind && group == o.group;
  }
};

struct ExitReport {
  std::string node_name;
  int round = 0;
  int rank = 0;
  int64_t pid = 0;
  bool signaled = false;  // true: code is the signal number
  int code = 0;
  std::vector<std::string> last_lines;  // the worker's last output lines
  int64_t exit_ms = 0;  // Unix epoch ms when the agent saw the exit (0: when reported)
};

struct ProgressReport {
  int rank = 0;
  int round = 0;  // 0 = the current round
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_s = 0;
  int64_t rss_bytes = 0;
  std::optional<PlanPosition> position;  // unset: an older worker, or none yet
};

struct LogLine {
  int rank = 0;
  bool is_stderr = false;
  std::string text;     // one line, without the newline
  int64_t time_ms = 0;  // Unix epoch
};

// ---- status (JobStatus in the proto) ----

struct NodeStatus {
  std::string name;
  std::string advertise_addr;
  int node_rank = -1;  // -1: not a member of the current round
  AgentState state = AgentState::kUnknown;
  int64_t last_heartbeat_ms_ago = -1;  // -1: never heard from
  std::vector<int> ranks;
};

struct RankStatus {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  WorkerPhase phase = WorkerPhase::kUnknown;
  bool signaled = false;
  int exit_code = 0;
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_s = 0;
  int64_t rss_bytes = 0;
  std::optional<PlanPosition> position;
  int64_t position_age_ms = -1;  // since the position last changed; -1: never reported
};

struct Failure {
  int rank = -1;  // -1: a node, not a rank
  std::string host;
  std::string cause;  // "exit code 3", "signal 9 (Killed)", "node lost: no heartbeat for 6.0 s"
  std::vector<std::string> last_lines;
  int64_t time_ms = 0;  // Unix epoch
};

struct JobStatus {
  std::string job_id;
  JobPhase phase = JobPhase::kPending;
  int round = 0;
  int restarts = 0;
  int max_restarts = 0;
  std::vector<NodeStatus> nodes;         // every hostfile node, in hostfile order
  std::vector<RankStatus> ranks;         // of the current (or last closed) round, by rank
  std::optional<Failure> first_failure;  // the root cause of the latest failed round
  int64_t uptime_ms = 0;
};

// Milliseconds since the Unix epoch (system clock).
int64_t NowUnixMs();

// "exit code 3", "signal 9 (Killed)".
std::string ExitCause(bool signaled, int code);

}  // namespace ds::launcher
