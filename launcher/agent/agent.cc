#include "launcher/agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "launcher/agent/agent_probes.h"
#include "launcher/agent/stack_dump.h"
#include "launcher/agent/worker_env.h"
#include "launcher/coordinator/coordinator_client.h"
#include "launcher/process/process.h"
#include "launcher/process/supervisor.h"
#include "launcher/state_store/copy_dir.h"
#include "launcher/state_store/copy_server.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One agent run. Fields fixed at construction, then the round's state (main thread), then
// what the supervisor callbacks share with the main thread (under mu_).
class Agent {
 public:
  Agent(const AgentOptions& o, std::unique_ptr<CoordinatorClient> client)
      : opt_(o),
        client_(std::move(client)),
        sup_([this](int id, bool err, std::string_view line) { OnLog(id, err, line); },
             [this](int id, ExitInfo info) { OnExit(id, std::move(info)); }) {}

  int Run();

 private:
  // The workers' in-memory copies (fault_tolerance.in_memory_interval): a directory in RAM they
  // write their own copies into, and the server other nodes' workers send theirs to and
  // restarted workers fetch from, on the address this node advertises (every interface when it
  // advertises none). Without them the agent keeps no copies and says why.
  void StartCopyStore();
  JoinRequest MakeJoinRequest(int round) const;
  void ProbeLinks();  // agent_probes.h
  Status StartWorkers(const JoinResult& join);
  // Heartbeats and watches the round until it ends: an exit code for the agent, or -1 when
  // the coordinator restarts the job (*next_round is then the round to join).
  int SuperviseRound(int* next_round);
  void ReportStartFailure(const Status& s);
  void OnLog(int id, bool is_stderr, std::string_view line);
  void OnExit(int id, ExitInfo info);
  void FlushLogs();
  HeartbeatRequest MakeHeartbeat() const;
  // DUMP_STACKS: starts a stack capture of each running worker among `ranks` (StackDumper).
  void DumpStacks(const std::vector<int>& ranks);
  // Stops the workers (SIGTERM, grace, SIGKILL, session sweep) and flushes their logs.
  void StopWorkers(const char* why);
  bool LauncherGone() const { return stdin_eof_.load(); }

  const AgentOptions opt_;
  std::unique_ptr<CoordinatorClient> client_;
  Supervisor sup_;
  std::unique_ptr<StackDumper> dumper_;  // set by Run(); destroyed (joined) before sup_
  std::unique_ptr<CopyDir> copies_;
  std::unique_ptr<CopyServer> copy_server_;  // serves copies_ (destroyed first)
  JoinResult join_;
  std::atomic<bool> stdin_eof_{false};
  int grace_ms_ = 10000;

  mutable std::mutex mu_;
  std::vector<LogLine> pending_logs_;  // guarded by mu_
  std::vector<WorkerReport> workers_;  // guarded by mu_
};

void Agent::OnLog(int id, bool is_stderr, std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || id >= static_cast<int>(workers_.size())) return;
  pending_logs_.push_back({workers_[id].rank, is_stderr, std::string(line), NowMs()});
}

void Agent::OnExit(int id, ExitInfo info) {
  ExitReport r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id < 0 || id >= static_cast<int>(workers_.size())) return;
    WorkerReport& w = workers_[id];
    w.phase = (!info.signaled && info.code_or_signal == 0) ? WorkerPhase::kSucceeded
                                                           : WorkerPhase::kFailed;
    r = {opt_.node_name, join_.round,         w.rank,          w.pid,
         info.signaled,  info.code_or_signal, info.last_lines, info.exit_ms};
  }
  FlushLogs();  // the worker's last lines reach the coordinator before its exit
  DS_LOG_INFO("agent", "rank {} (pid {}) exited: {}", r.rank, r.pid, info.ToString());
  Status s = client_->ReportExit(r);
  if (!s.ok()) DS_LOG_WARN("agent", "ReportExit: {}", s.ToString());
}

void Agent::FlushLogs() {
  std::vector<LogLine> lines;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lines.swap(pending_logs_);
  }
  if (lines.empty()) return;
  Status s = client_->SendLogs(opt_.node_name, lines);
  if (!s.ok()) DS_LOG_WARN("agent", "SendLogs: {}", s.ToString());
}

HeartbeatRequest Agent::MakeHeartbeat() const {
  HeartbeatRequest h;
  h.node_name = opt_.node_name;
  h.round = join_.round;
  std::lock_guard<std::mutex> lock(mu_);
  h.workers = workers_;
  return h;
}

void Agent::DumpStacks(const std::vector<int>& ranks) {
  std::vector<WorkerReport> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers = workers_;
  }
  for (int rank : ranks) {
    auto it = std::find_if(workers.begin(), workers.end(),
                           [rank](const WorkerReport& w) { return w.rank == rank; });
    // Another node's rank, or one that exited (its pid may be reused): nothing to attach to.
    if (it == workers.end() || it->phase != WorkerPhase::kRunning || it->pid <= 0) {
      DS_LOG_DEBUG("agent", "DUMP_STACKS: rank {} does not run here", rank);
      continue;
    }
    if (dumper_) dumper_->Request(join_.round, rank, it->pid);
  }
}

Status Agent::StartWorkers(const JoinResult& join) {
  const int local = static_cast<int>(join.global_ranks.size());
  std::vector<std::vector<int>> cpus = SplitCpus(local);
  std::vector<std::pair<std::string, std::string>> base = InheritedEnv();
  for (const auto& [k, v] : join.job.env) base.emplace_back(k, v);
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_.assign(local, WorkerReport());
  }
  for (int i = 0; i < local; ++i) {
    SpawnOptions so;
    so.argv = join.job.worker_argv;
    so.env = WorkerEnv(opt_, join, copies_ && copy_server_ ? copies_->path() : "", base, i,
                       cpus[i].size());
    so.cpus = cpus[i];
    DS_ASSIGN_OR_RETURN(Child child, Spawn(so));
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers_[i] = {join.global_ranks[i], i, child.pid, WorkerPhase::kRunning};
    }
    DS_RETURN_IF_ERROR(sup_.Add(i, std::move(child)));
  }
  DS_LOG_INFO("agent", "round {}: node rank {} of {}, started ranks {}..{} of {}", join.round,
              join.node_rank, join.num_nodes, join.global_ranks.front(), join.global_ranks.back(),
              join.world_size);
  return OkStatus();
}

void Agent::StopWorkers(const char* why) {
  if (sup_.num_tracked() > 0) DS_LOG_INFO("agent", "stopping workers: {}", why);
  Status s = sup_.StopAll(milliseconds(grace_ms_));
  if (!s.ok()) DS_LOG_WARN("agent", "StopAll: {}", s.ToString());
  FlushLogs();
}

// The coordinator learns that this node's workers could not start, as if they had exited.
void Agent::ReportStartFailure(const Status& s) {
  DS_LOG_ERROR("agent", "starting workers: {}", s.ToString());
  ExitReport r{opt_.node_name,
               join_.round,
               join_.global_ranks.empty() ? 0 : join_.global_ranks[0],
               0,
               false,
               127,
               {s.ToString()},
               NowMs()};
  client_->ReportExit(r).IgnoreError();
}

int Agent::SuperviseRound(int* next_round) {
  const milliseconds interval(std::max(50, join_.job.heartbeat_interval_ms));
  auto last_ok = Clock::now();
  auto next_beat = Clock::now();
  while (true) {
    std::this_thread::sleep_for(milliseconds(20));
    if (int sig = g_signal.load()) {
      StopWorkers("agent received a signal");
      return 128 + sig;
    }
    if (LauncherGone()) {
      StopWorkers("the launcher is gone (stdin closed)");
      return 1;
    }
    FlushLogs();
    if (Clock::now() < next_beat) continue;
    next_beat = Clock::now() + interval;
    auto reply = client_->Heartbeat(MakeHeartbeat());
    if (!reply.ok()) {
      if (Clock::now() - last_ok <= opt_.coordinator_timeout) continue;
      DS_LOG_ERROR("agent", "coordinator unreachable for {} ms ({}): stopping",
                   opt_.coordinator_timeout.count(), reply.status().ToString());
      StopWorkers("the coordinator is gone");
      return 1;
    }
    last_ok = Clock::now();
    if (reply->command == AgentCommand::kShutdown) {
      StopWorkers("the job ended");
      return 0;
    }
    if (reply->command == AgentCommand::kStopWorkers) {
      StopWorkers("the coordinator restarts the job");
      *next_round = std::max(reply->round, join_.round + 1);
      return -1;
    }
    if (reply->command == AgentCommand::kDumpStacks) DumpStacks(reply->dump_ranks);
  }
}

void Agent::StartCopyStore() {
  auto dir = CopyDir::Create();
  if (!dir.ok()) {
    DS_LOG_WARN("agent", "no directory for in-memory copies: {}", dir.status().ToString());
    return;
  }
  copies_ = std::move(dir).value();
  const std::string host = opt_.advertise_addr.empty() ? "0.0.0.0" : opt_.advertise_addr;
  auto server = CopyServer::Start(host, 0, opt_.token, copies_->path());
  if (!server.ok()) {
    DS_LOG_WARN("agent", "no server for in-memory copies: {}", server.status().ToString());
    return;
  }
  copy_server_ = std::move(server).value();
}

// Failures are the launcher's to report (it stops the job, and our Join then ends).
void Agent::ProbeLinks() {
  AgentProbes p;
  p.node_name = opt_.node_name;
  p.token = opt_.token;
  if (!copy_server_) {
    p.store_error = UnavailableError("this node's store server did not start (see its log)");
  } else {
    StatusOr<std::string> host = opt_.advertise_addr.empty()
                                     ? LocalAddressToward(opt_.coordinator)
                                     : StatusOr<std::string>(opt_.advertise_addr);
    if (host.ok())
      p.store = *host + ":" + std::to_string(copy_server_->port());
    else
      p.store_error = host.status();
  }
  if (Status s = RunAgentProbes(client_.get(), p); !s.ok())
    DS_LOG_ERROR("agent", "{}", s.ToString());
}

JoinRequest Agent::MakeJoinRequest(int round) const {
  JoinRequest req{opt_.node_name, opt_.advertise_addr, opt_.slots, round, getpid()};
  req.state_store_port = copy_server_ ? copy_server_->port() : 0;
  if (copies_)
    for (const HeldCopy& c : copies_->Held()) req.held_copies.push_back({c.rank, c.step});
  return req;
}

int Agent::Run() {
  const Status subreaper = sup_.EnableSubreaper();
  if (!subreaper.ok()) DS_LOG_WARN("agent", "{}", subreaper.ToString());
  // The stack tools are our children too; only without the subreaper loop must we reap them.
  dumper_ = std::make_unique<StackDumper>(opt_.node_name, client_.get(), !subreaper.ok());
  if (Status s = sup_.Start(); !s.ok()) {
    DS_LOG_ERROR("agent", "{}", s.ToString());
    return 1;
  }
  if (opt_.watch_stdin) {
    std::thread([this] {
      char buf[256];
      while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
      }
      stdin_eof_.store(true);
    }).detach();  // blocked in read(); ends with the process
  }
  StartCopyStore();
  if (opt_.probe_links) ProbeLinks();
  int next_round = 0;
  while (true) {
    auto join = client_->Join(MakeJoinRequest(next_round), milliseconds(3600 * 1000));
    if (!join.ok()) {
      DS_LOG_ERROR("agent", "{}", join.status().ToString());
      return 2;
    }
    join_ = *join;
    // Copies after the step the round resumes from belong to the abandoned run.
    if (copies_) copies_->DropAfter(join_.memory_step > 0 ? join_.memory_step : -1);
    grace_ms_ = join_.job.grace_ms > 0 ? join_.job.grace_ms : 10000;
    if (Status s = StartWorkers(join_); !s.ok()) ReportStartFailure(s);
    if (const int code = SuperviseRound(&next_round); code >= 0) return code;
  }
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  AgentOptions o = options;
  std::string private_token;
  if (o.token_file.empty()) {  // workers read the token from a 0600 file we own
    char path[] = "/tmp/ds-agent-token-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || fchmod(fd, 0600) != 0 ||
        write(fd, o.token.data(), o.token.size()) != (ssize_t)o.token.size()) {
      std::perror("ds-agent: token file");
      return 1;
    }
    close(fd);
    o.token_file = private_token = path;
  }
  ClientOptions co;
  co.address = o.coordinator;
  co.token = o.token;
  co.tls_ca_path = o.tls_ca;
  co.tls_cert_path = o.tls_cert;
  co.tls_key_path = o.tls_key;
  co.tls_server_name = o.tls_server_name;
  auto client = CoordinatorClient::Create(co);
  int rc;
  if (!client.ok()) {
    DS_LOG_ERROR("agent", "{}", client.status().ToString());
    rc = 2;
  } else {
    Agent agent(o, std::move(client).value());
    rc = agent.Run();
  }
  if (!private_token.empty()) unlink(private_token.c_str());
  return rc;
}

}  // namespace ds::launcher
