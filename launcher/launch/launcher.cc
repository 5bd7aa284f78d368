#include "launcher/launch/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/coordinator/coordinator_server.h"
#include "launcher/hostfile.h"
#include "launcher/launch/agent_backend.h"
#include "launcher/launch/deepspeed_habits.h"
#include "launcher/launch/job_dir.h"
#include "launcher/launch/launch_inputs.h"
#include "launcher/process/supervisor.h"
#include "launcher/resource_filter.h"
#include "launcher/tls_bundle.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_builder.h"
#include "runtime/plan/plan_config.h"
#include "runtime/plan/plan_hash.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

milliseconds Ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

// Prints forwarded output as "[rank N] line" and a progress line from the job status.
class Console {
 public:
  explicit Console(CoordinatorState* state) : state_(state), tty_(isatty(STDOUT_FILENO)) {}
  void Pump(milliseconds wait) {
    LogChunk chunk = state_->ReadLogs(cursor_, 2000, wait);
    cursor_ = chunk.next_cursor;
    for (const LogRecord& r : chunk.records) {
      // Workers draw their own progress line with '\r'; keep the last part.
      std::string text = r.line.text;
      size_t cr = text.rfind('\r');
      if (cr != std::string::npos) text = text.substr(cr + 1);
      size_t esc = text.find("\033[K");
      if (esc != std::string::npos) text.erase(esc, 3);
      ClearLine();
      std::printf("[rank %d] %s\n", r.line.rank, text.c_str());
    }
    if (tty_) Progress();
    std::fflush(stdout);
  }
  void ClearLine() {
    if (progress_shown_) std::printf("\r\033[K");
    progress_shown_ = false;
  }

 private:
  void Progress() {
    JobStatus s = state_->Snapshot();
    if (s.ranks.empty() || s.phase != JobPhase::kRunning) return;
    int64_t step = INT64_MAX, total = 0;
    double loss = 0, tps = 0;
    for (const RankStatus& r : s.ranks) {
      step = std::min(step, r.step);
      total = std::max(total, r.total_steps);
      loss += r.loss / s.ranks.size();
      tps += r.tokens_per_s;
    }
    if (total <= 0) return;
    auto now = std::chrono::steady_clock::now();
    if (s.round != eta_round_ || step < eta_step_) {  // a new round restarts the estimate
      eta_round_ = s.round;
      eta_step_ = step;
      eta_start_ = now;
    }
    std::string eta = "?";
    double elapsed = std::chrono::duration<double>(now - eta_start_).count();
    if (step > eta_step_ && elapsed > 0) {
      long left = std::lround((total - step) * elapsed / (step - eta_step_));
      eta = left >= 60 ? std::to_string(left / 60) + "m" + std::to_string(left % 60) + "s"
                       : std::to_string(left) + "s";
    }
    std::printf(
        "\r\033[Kjob %s | round %d | step %lld/%lld | loss %.4f | %.0f tok/s | %zu ranks | ETA %s",
        s.job_id.c_str(), s.round, static_cast<long long>(step), static_cast<long long>(total),
        loss, tps, s.ranks.size(), eta.c_str());
    progress_shown_ = true;
  }
  CoordinatorState* state_;
  bool tty_;
  bool progress_shown_ = false;
  uint64_t cursor_ = 0;
  int eta_round_ = -1;
  int64_t eta_step_ = 0;
  std::chrono::steady_clock::time_point eta_start_;
};

void PrintFailure(const JobOutcome& out) {
  std::fprintf(stderr, "ds-launch: job %s: %s\n", JobPhaseName(out.phase), out.message.c_str());
  if (!out.first_failure) return;
  const Failure& f = *out.first_failure;
  if (f.rank >= 0)
    std::fprintf(stderr, "ds-launch: first failure: rank %d on %s: %s\n", f.rank, f.host.c_str(),
                 f.cause.c_str());
  else
    std::fprintf(stderr, "ds-launch: first failure: node %s: %s\n", f.host.c_str(),
                 f.cause.c_str());
  if (!f.last_lines.empty()) {
    std::fprintf(stderr, "ds-launch: last lines of rank %d:\n", f.rank);
    for (const std::string& l : f.last_lines) std::fprintf(stderr, "    %s\n", l.c_str());
  }
}

}  // namespace

int RunLaunch(const LaunchOptions& given) {
  auto fail_input = [](const Status& s) {
    std::fprintf(stderr, "ds-launch: %s\n", s.ToString().c_str());
    return 2;
  };
  // 1. Validate everything before anything starts; DeepSpeed's spellings first.
  LaunchOptions o = given;
  if (Status s = ResolveDeepSpeedHabits(&o); !s.ok()) return fail_input(s);
  auto ds_env = LoadDeepSpeedEnv(HomeDir(), CurrentDir(), std::getenv("DS_ENV_FILE"));
  if (!ds_env.ok()) return fail_input(ds_env.status());
  auto config = config::LoadJobConfig(o.config);
  if (!config.ok()) return fail_input(config.status());
  if (o.tp > 0) config->parallel.tensor = o.tp;
  if (o.pp > 0) config->parallel.pipeline = o.pp;
  auto nodes = SelectNodes(o);
  if (!nodes.ok()) return fail_input(nodes.status());
  auto worker = FindBinary(o.worker, "ds-worker", "runtime/worker/ds-worker");
  if (!worker.ok()) return fail_input(worker.status());
  auto agent = FindBinary(o.agent, "ds-agent", "launcher/agent/ds-agent");
  if (!agent.ok()) return fail_input(agent.status());
  bool all_loopback = true;
  for (const NodeSpec& n : *nodes) all_loopback = all_loopback && IsLoopback(n.name);
  std::string bind = o.coordinator;
  if (bind.empty() && o.backend == "slurm") {
    bind = "0.0.0.0:0";  // inside an allocation: every interface; agents dial our host name
  } else if (bind.empty()) {
    if (!all_loopback)
      return fail_input(
          InvalidArgumentError("the hosts are not all on this machine: pass --coordinator "
                               "HOST:PORT with an address they can reach"));
    bind = "127.0.0.1:0";
  }
  auto tls = TlsMaterial(o);
  if (!tls.ok()) return fail_input(tls.status());
  int world = 0;
  for (const NodeSpec& n : *nodes) world += n.slots;
  // The step plan, made once here: a configuration the planner rejects (a world size that
  // does not divide the batch, impossible buckets) fails before any process starts, and
  // every worker checks its own plan against this hash.
  auto graph = plan::LoadModelGraph(*config);
  if (!graph.ok()) return fail_input(graph.status());
  if (!config->model.hf.empty()) {  // model.hf: its weights fit the model (headers only)
    auto spec = plan::HfModelSpec(*config);
    if (!spec.ok()) return fail_input(spec.status());
    Status weights = ckpt::CheckHfWeights(config->model.hf, *spec, *graph);
    if (!weights.ok()) return fail_input(weights);
  }
  auto plan_config = plan::PlanConfigFromJob(*config);
  if (!plan_config.ok()) return fail_input(plan_config.status().WithPrefix(o.config));
  auto topo = plan::TopologyFor(world, *plan_config);
  if (!topo.ok()) return fail_input(topo.status().WithPrefix(o.config));
  if (Status s = CheckTensorGroupsOnNodes(*nodes, topo->tp); !s.ok())
    return fail_input(s.WithPrefix(o.config));
  auto plan = plan::MakePlan(*graph, *topo, *plan_config);
  if (!plan.ok())
    return fail_input(plan.status().WithPrefix(o.config + ": world " + std::to_string(world)));

  auto token = NewJobToken();
  if (!token.ok()) return fail_input(token.status());
  auto dir = CreateJobDir(*token);
  if (!dir.ok()) return fail_input(dir.status());
  if (!tls->bundle.empty())
    if (Status s = WriteTlsClient(*dir, tls->client); !s.ok()) return fail_input(s);
  if (o.detach) {
    pid_t pid = fork();
    if (pid < 0) return fail_input(ErrnoToStatus(errno, "fork"));
    if (pid > 0) {
      std::printf(
          "ds-launch: job %s detached (pid %d); ds-launch status / ds-launch stop; log "
          "%s/launch.log\n",
          dir->job_id.c_str(), pid, dir->path.c_str());
      return 0;
    }
    setsid();
    std::string log = dir->path + "/launch.log";
    if (!freopen(log.c_str(), "a", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(2);
    if (!freopen("/dev/null", "r", stdin)) _exit(2);
  }

  // 2. The coordinator, in this process.
  CoordinatorOptions co;
  co.bind_address = bind;
  co.token = *token;
  co.tls = {o.tls_cert, o.tls_key, o.tls_ca};
  co.config.nodes = *nodes;
  co.config.join_timeout = Ms(o.rdzv_timeout_s);
  co.config.last_call = milliseconds(0);
  co.config.heartbeat_interval = Ms(o.heartbeat_s);
  co.config.node_timeout = Ms(o.node_timeout_s);
  co.config.max_restarts = o.max_restarts;
  co.config.success_wait = milliseconds(60000);
  co.config.job.job_id = dir->job_id;
  co.config.job.worker_argv = {*worker, "--config", Absolute(o.config)};
  for (const auto& [flag, v] : {std::pair{"--tp", o.tp}, std::pair{"--pp", o.pp}})
    if (v > 0)
      co.config.job.worker_argv.insert(co.config.job.worker_argv.end(), {flag, std::to_string(v)});
  co.config.job.grace_ms = static_cast<int>(o.grace_s * 1000);
  co.config.job.env["DS_PLAN_HASH"] = plan::HashHex(plan->hash());
  // Agents drop the DS_* variables of their own environment (stale rank settings); the
  // worker diagnostics a user asks for on the ds-launch command line, and the accelerator
  // choice (runtime/exec/accelerator.h), travel with the job.
  for (const char* name : {"DS_MEMORY_PROFILE", "DS_PROFILE_OPS", "DS_ACCELERATOR"})
    if (const char* v = std::getenv(name)) co.config.job.env[name] = v;
  for (const auto& [k, v] : ds_env->vars) co.config.job.env[k] = v;  // .deepspeed_env
  for (const std::string& f : ds_env->files)
    std::printf("ds-launch: exporting the variables of %s to every rank\n", f.c_str());
  auto server = CoordinatorServer::Start(co);
  if (!server.ok()) return fail_input(server.status());
  CoordinatorServer& srv = **server;
  const std::string dial = DialAddress(srv.address());
  if (Status s = WriteCoordinatorAddress(*dir, dial); !s.ok()) return fail_input(s);
  std::printf(
      "ds-launch: job %s: %zu node(s), %d rank(s), ZeRO stage %d, plan %s, coordinator %s, "
      "launcher %s\n",
      dir->job_id.c_str(), nodes->size(), world, config->zero.stage,
      plan::HashHex(plan->hash()).c_str(), dial.c_str(), o.backend.c_str());
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // 3. One agent per node.
  AgentBackendOptions bo;
  bo.backend = o.backend;
  bo.agent = *agent;
  bo.coordinator = dial;
  bo.token = *token;
  bo.ssh_port = o.ssh_port;
  bo.ssh_user = o.ssh_user;
  bo.ssh_identity = o.ssh_identity;
  bo.ssh_config = o.ssh_config;
  bo.tls_bundle = tls->bundle;
  bo.tls_server_name = o.tls_server_name;
  bo.heartbeat_timeout_ms = static_cast<int>(std::max(6.0, 2 * o.node_timeout_s) * 1000);
  AgentBackend agents(bo, &srv.state());
  if (Status s = agents.Start(*nodes); !s.ok()) {
    std::fprintf(stderr, "ds-launch: %s\n", s.ToString().c_str());
    srv.state().Stop("agents could not be started: " + s.message()).IgnoreError();
  }

  // 4. Follow the job.
  Console console(&srv.state());
  bool interrupted = false;
  while (true) {
    console.Pump(milliseconds(200));
    if (int sig = g_signal.exchange(0)) {
      console.ClearLine();
      std::fprintf(stderr, "ds-launch: signal %d: stopping the job\n", sig);
      srv.state().Stop("ds-launch received signal " + std::to_string(sig)).IgnoreError();
      interrupted = true;
    }
    if (IsTerminal(srv.state().Snapshot().phase)) break;
  }
  console.Pump(milliseconds(300));
  console.ClearLine();
  srv.state().WaitForShutdownDelivered(Ms(o.heartbeat_s * 3 + 1));
  agents.WaitAndStop(Ms(o.grace_s + 5));
  console.Pump(milliseconds(0));
  // After the agents stopped: every exit is reported, so the root cause is settled.
  auto outcome = srv.WaitForEnd(milliseconds(0));
  srv.Shutdown();
  if (!outcome.ok()) {
    std::fprintf(stderr, "ds-launch: %s\n", outcome.status().ToString().c_str());
    return 1;
  }
  if (outcome->phase == JobPhase::kSucceeded) {
    std::printf("ds-launch: job %s succeeded: %s (round %d, %d restart(s))\n", dir->job_id.c_str(),
                outcome->message.c_str(), outcome->round, outcome->restarts);
    return 0;
  }
  PrintFailure(*outcome);
  return outcome->phase == JobPhase::kStopped || interrupted ? 3 : 1;
}

}  // namespace ds::launcher
