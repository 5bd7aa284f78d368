// CoordinatorState: the logic of the coordinator, without gRPC. It runs the rendezvous
// rounds, records heartbeats, worker exits and progress, drives the job state machine
//
//   PENDING -> RENDEZVOUS -> RUNNING -> SUCCEEDED (every rank exited 0)
//                               |  \--> FAILED (failure without restarts left, join
//                               |       timeout, or success_wait exceeded)
//                               v
//                          RESTARTING (a failure with restarts left: every agent gets
//                               |      STOP_WORKERS and round r+1 opens)
//                               \--> RUNNING when round r+1 closes
//   any phase -> STOPPED by Stop(); agents then get SHUTDOWN,
//
// answers each heartbeat (CONTINUE / STOP_WORKERS / SHUTDOWN), keeps the workers' log
// lines in a bounded buffer and a per-round KV store, and publishes a JobStatus snapshot
// with a change counter. See Note [Failures] in coordinator_state.cc.
//
// Thread-safe: one mutex guards everything; blocking calls (Join, KvGet, KvWait,
// WaitForChange, ReadLogs, WaitForEnd) wait on condition variables, bounded by the
// caller's WaitOptions and their own timeouts. Protocol timers use the injected Clock;
// Tick() applies them (CoordinatorServer calls it every 50 ms; tests after advancing a
// FakeClock).
//
//   DS_ASSIGN_OR_RETURN(auto state, CoordinatorState::Create(config));
//   StatusOr<JoinResult> r = state->Join(request, WaitOptions{});  // on a server thread
//   DS_ASSIGN_OR_RETURN(JobOutcome end, state->WaitForEnd(std::chrono::hours(24)));
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/coordinator/clock.h"
#include "launcher/coordinator/coordinator_types.h"
#include "launcher/coordinator/hang.h"
#include "launcher/coordinator/log_buffer.h"
#include "launcher/coordinator/rendezvous.h"
#include "launcher/coordinator/round_kv_store.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct CoordinatorConfig {
  std::vector<NodeSpec> nodes;                     // the hostfile's nodes; node rank order
  int min_nodes = 0;                               // 0 = max_nodes
  int max_nodes = 0;                               // 0 = all nodes
  std::chrono::milliseconds join_timeout{600000};  // round opened -> all joined
  std::chrono::milliseconds last_call{30000};      // min_nodes joined -> round closes
  std::chrono::milliseconds heartbeat_interval{5000};
  std::chrono::milliseconds node_timeout{0};  // no heartbeat for this long = LOST; 0 = 3x
  int max_restarts = 0;                       // restart rounds per job
  bool memory_copies = false;  // fault_tolerance.in_memory_interval > 0: say where restarts resume
  HangOptions hang;            // fault_tolerance.hang_timeout (hang.h)
  std::chrono::milliseconds stack_wait{20000};     // a hang report waits this long for stacks
  std::chrono::milliseconds success_wait{300000};  // first node done -> all must be done
  JobSpec job;                                     // handed to every agent in JoinResult
  // The job (job, hang.streams) comes later, through SetJob; until then Joins wait (`parallel:
  // auto` measures the links between the agents first, link_probes.h in launcher/launch).
  bool job_pending = false;
  size_t log_capacity_lines = 100000;
  size_t kv_max_bytes = 64 << 20;
};

// How long a blocking call may wait for its caller (a gRPC handler: the client's deadline
// and cancellation). Real (steady-clock) time, unlike the protocol timers.
struct WaitOptions {
  SteadyTime deadline = SteadyTime::max();
  std::function<bool()> cancelled;  // polled every 100 ms while waiting; may be empty
};

struct JobOutcome {
  JobPhase phase = JobPhase::kPending;  // SUCCEEDED, FAILED or STOPPED
  int round = 0;
  int restarts = 0;
  std::optional<Failure> first_failure;
  std::string message;  // "all 8 ranks exited 0", "rank 3 on h2: exit code 3", "stopped: ..."
};

class CoordinatorState {
 public:
  // InvalidArgument for a bad config (no nodes, duplicate names, min/max out of range,
  // non-positive windows). `clock` must outlive the state; null = SteadyClock().
  static StatusOr<std::unique_ptr<CoordinatorState>> Create(CoordinatorConfig config,
                                                            const Clock* clock = nullptr);
  ~CoordinatorState();

  // ---- agents ----
  // Joins the open round and blocks until it closes (-> this node's ranks), fails
  // (DeadlineExceeded: "rendezvous round 1: 1/2 nodes joined within 10.0 s, missing: b"),
  // the job ends (Aborted) or the caller gives up (DeadlineExceeded/Cancelled; the node
  // then leaves the open round). FailedPrecondition, naming the current round, for a
  // closed, older or newer round or a job that is over; NotFound for a node not in the
  // hostfile; InvalidArgument when its slots disagree with the hostfile.
  StatusOr<JoinResult> Join(const JoinRequest& request, const WaitOptions& wait);
  // Records the heartbeat and worker states; returns what the agent must do next.
  StatusOr<HeartbeatReply> Heartbeat(const HeartbeatRequest& request);
  // Exit 0 = rank succeeded; anything else in a running round is a failure.
  Status ReportExit(const ExitReport& report);
  Status ReportProgress(const ProgressReport& report);
  Status AppendLogs(const std::string& node_name, std::vector<LogLine> lines);
  // An agent's capture of a rank's thread stacks, asked for by a hang report (DUMP_STACKS).
  Status ReportStacks(const StackReport& report);

  // ---- KV store of a round (0 = the current one; another round is FailedPrecondition) ----
  Status KvSet(int round, const std::string& key, std::string value);
  // Waits up to `timeout` (protocol clock) for the key: DeadlineExceeded naming it; with
  // timeout <= 0 an absent key is NotFound at once.
  StatusOr<std::string> KvGet(int round, const std::string& key, std::chrono::milliseconds timeout,
                              const WaitOptions& wait);
  // Waits until every key exists: DeadlineExceeded naming the missing ones.
  Status KvWait(int round, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                const WaitOptions& wait);
  StatusOr<int64_t> KvAdd(int round, const std::string& key, int64_t delta);

  // ---- the job ----
  // The job of a state made with job_pending, and the hang watch's stream per rank: the Joins
  // waiting for it go on. FailedPrecondition when it was not pending or the job is over.
  Status SetJob(JobSpec job, std::vector<int> hang_streams);
  // Ends the job as STOPPED (agents get SHUTDOWN). No-op once the job is over.
  Status Stop(const std::string& reason);
  // The current status; `version` (optional) receives the change counter it reflects.
  JobStatus Snapshot(uint64_t* version = nullptr) const;
  // The change counter: bumped by every change of the status except heartbeat ages.
  uint64_t version() const;
  // Blocks until the change counter differs from `seen`; returns the new value.
  StatusOr<uint64_t> WaitForChange(uint64_t seen, const WaitOptions& wait);
  // Waits up to `wait` (real time) for lines after `cursor`; may return none.
  LogChunk ReadLogs(uint64_t cursor, size_t max_lines, std::chrono::milliseconds wait);
  // Blocks until the job is over; DeadlineExceeded after `timeout` (real time).
  StatusOr<JobOutcome> WaitForEnd(std::chrono::milliseconds timeout);
  // After the end: waits until every member agent that is not LOST was answered SHUTDOWN.
  bool WaitForShutdownDelivered(std::chrono::milliseconds timeout);

  // Applies the protocol timers at clock->Now(): closes or fails the open round, marks
  // silent nodes LOST, ends a success wait; wakes every waiter.
  void Tick();
  // The server is going away: every waiter returns Unavailable, now and later.
  void Close();

  // The config as validated: min_nodes, max_nodes and node_timeout filled in.
  const CoordinatorConfig& config() const { return config_; }

 private:
  struct NodeRecord {
    std::string advertise_addr;
    AgentState state = AgentState::kUnknown;
    std::optional<SteadyTime> last_heartbeat;  // or Join
    int64_t agent_pid = 0;
    int node_rank = -1;      // in the last closed round; -1: not a member
    std::vector<int> ranks;  // its global ranks in that round
    JoinResult result;       // the answer to its Join of round result_round
    int result_round = 0;
    bool shutdown_delivered = false;  // a heartbeat was answered SHUTDOWN
  };
  CoordinatorState(CoordinatorConfig config, const Clock* clock);

  // All *Locked helpers require mu_ held.
  StatusOr<int> NodeIndexLocked(const std::string& name) const;
  Status WaitSliceLocked(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         const WaitOptions& wait, SteadyTime protocol_deadline);
  Status EndedErrorLocked() const;
  void EvaluateLocked(SteadyTime now);
  void OnRoundClosedLocked();
  // coordinator_state_copies.cc: the round's in-memory copies in each member's JoinResult (where
  // its ranks send theirs; after a failure the step to resume from and the copies' sources).
  void AssignCopiesLocked(int round, int world);
  // coordinator_state_rounds.cc: a node joining a running elastic job that has room for it; with
  // in-memory copies it is admitted at once (round r+1 opens; not a restart), without them it
  // waits for the next round.
  bool WaitsForAdmissionLocked(int node_index) const;
  Status AwaitAdmissionLocked(std::unique_lock<std::mutex>& lock, int node_index,
                              const WaitOptions& wait);
  // coordinator_state_rounds.cc too: round r+1 opens (RESTARTING): the running agents are
  // answered STOP_WORKERS, and the round awaits every member of round r that is not lost
  // (Rendezvous::Expect) until it joins or goes silent for node_timeout (CheckAwaitedLocked).
  void OpenNextRoundLocked();
  void CheckAwaitedLocked(SteadyTime now);
  void CheckNodesLocked(SteadyTime now);
  void CheckSuccessWaitLocked(SteadyTime now);
  // coordinator_state_hang.cc: no rank moved for the deadline -> a hang report, the stuck ranks'
  // stacks asked of their agents, then the round's failure (with the stacks) once they are in,
  // stack_wait passed, or the agents that owe them went silent (3 heartbeat intervals).
  void CheckHangLocked(SteadyTime now);
  void EndHangLocked();
  // The ranks of node `node_index` whose stacks the open hang report still has to ask for.
  std::vector<int> DumpRanksForLocked(int node_index);
  // A later report of a rank that exited before the recorded first failure: it becomes the root
  // cause (Note [Failures]). Returns whether it did.
  bool EarlierRootCauseLocked(const Failure& failure);
  static std::string FailureText(const Failure& failure);  // "rank 3 on b: signal 9 (Killed)"
  void OnFailureLocked(Failure failure);
  void EndJobLocked(JobPhase phase, const std::string& message);
  void MarkRankSucceededLocked(int rank);
  AgentCommand CommandForLocked(int node_index, int round) const;
  StatusOr<int> KvRoundLocked(int round) const;
  void ChangedLocked();

  // Fixed at construction but for job and hang.streams, which SetJob sets once (under mu_)
  // before any round closes.
  CoordinatorConfig config_;
  const Clock* const clock_;
  const SteadyTime started_at_;

  mutable std::mutex mu_;
  std::condition_variable round_cv_;   // rendezvous rounds closing or failing
  std::condition_variable kv_cv_;      // KV writes, round changes
  std::condition_variable change_cv_;  // version_ changes, job end, SHUTDOWN delivery
  std::condition_variable log_cv_;     // new log lines
  // Guarded by mu_.
  JobPhase phase_ = JobPhase::kPending;
  bool job_pending_ = false;  // config_.job not given yet (SetJob)
  Rendezvous rendezvous_;
  std::vector<NodeRecord> nodes_;  // hostfile order
  int last_world_ = 0;  // the last closed round's world (in-memory copies: memory_copies.h)
  std::vector<RankStatus> ranks_;  // of the last closed round
  std::vector<int> rank_node_;     // rank -> node index
  int ranks_round_ = 0;            // the round ranks_ belongs to
  int restarts_ = 0;
  bool round_failed_ = false;  // the running round already had its first failure
  std::optional<Failure> first_failure_;
  std::optional<SteadyTime> first_done_at_;  // a node's ranks all exited 0
  std::string first_done_node_;
  std::string end_message_;
  uint64_t version_ = 1;
  bool closed_ = false;
  RoundKvStore kv_;
  LogBuffer logs_;
  // The running round's positions (reset when a round closes) and its open hang report.
  std::unique_ptr<HangWatch> hang_;
  struct HangReport {
    std::string diagnosis;
    std::vector<int> ranks;             // whose stacks are asked for
    std::vector<int> asked;             // of those, asked of their agent
    std::map<int, std::string> stacks;  // received, by rank
    SteadyTime at{};
  };
  std::optional<HangReport> hang_report_;
};

}  // namespace ds::launcher
