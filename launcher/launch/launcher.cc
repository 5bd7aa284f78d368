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
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launcher/coordinator/coordinator_server.h"
#include "launcher/hostfile.h"
#include "launcher/launch/agent_backend.h"
#include "launcher/launch/deepspeed_habits.h"
#include "launcher/launch/job_console.h"
#include "launcher/launch/job_dir.h"
#include "launcher/launch/job_plans.h"
#include "launcher/launch/launch_auto.h"
#include "launcher/launch/launch_inputs.h"
#include "launcher/launch/link_probes.h"
#include "launcher/process/supervisor.h"
#include "launcher/resource_filter.h"
#include "launcher/tls_bundle.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/model_loader.h"
#include "runtime/plan/plan_config.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/planner/plan_builder.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

milliseconds Ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

// Prints a bad input as ds-launch does and returns its exit code, 2.
int FailInput(const Status& s) {
  std::fprintf(stderr, "ds-launch: %s\n", s.ToString().c_str());
  return 2;
}

// What step 1 of RunLaunch works out before anything starts.
struct LaunchInputs {
  LaunchOptions o;  // the options after DeepSpeed's spellings
  DeepSpeedEnv ds_env;
  config::JobConfig config;  // with --tp / --pp applied
  std::vector<NodeSpec> nodes;
  std::string worker, agent;  // the binaries
  std::string bind;           // the coordinator's bind address
  Tls tls;
  int world = 0;    // ranks over all nodes
  NodeRange range;  // --nnodes
  proto::Plan plan;
  std::map<int, std::string> hashes;  // world -> plan hash
  // The workers' layout settings: parallel: auto's DS_LAYOUT (launch_auto.h), DS_NODE_SLOTS.
  std::map<std::string, std::string> layout_env;
  std::optional<planner::AutoRequest> auto_request;  // parallel: auto
  config::JobConfig auto_base;  // the job before parallel: auto chose (SettleLayout chooses again)
  bool probe_links = false;     // parallel: auto across nodes: the links measured first
};

// The coordinator's bind address: --coordinator, else every interface inside a slurm
// allocation, else loopback when every host is on this machine.
StatusOr<std::string> BindAddress(const LaunchOptions& o, const std::vector<NodeSpec>& nodes) {
  bool all_loopback = true;
  for (const NodeSpec& n : nodes) all_loopback = all_loopback && IsLoopback(n.name);
  std::string bind = o.coordinator;
  if (bind.empty() && o.backend == "slurm") {
    bind = "0.0.0.0:0";  // inside an allocation: every interface; agents dial our host name
  } else if (bind.empty()) {
    if (!all_loopback)
      return InvalidArgumentError(
          "the hosts are not all on this machine: pass --coordinator "
          "HOST:PORT with an address they can reach");
    bind = "127.0.0.1:0";
  }
  return bind;
}

// Step 1 but the plan: DeepSpeed's spellings first, then .deepspeed_env, the config, the
// nodes, the binaries, the bind address, the TLS material and the world size.
Status ResolveInputs(const LaunchOptions& given, LaunchInputs* in) {
  in->o = given;
  LaunchOptions& o = in->o;
  DS_RETURN_IF_ERROR(ResolveDeepSpeedHabits(&o));
  DS_ASSIGN_OR_RETURN(in->ds_env,
                      LoadDeepSpeedEnv(HomeDir(), CurrentDir(), std::getenv("DS_ENV_FILE")));
  DS_ASSIGN_OR_RETURN(in->config, config::LoadJobConfig(o.config));
  if (o.tp > 0) in->config.parallel.tensor = o.tp;
  if (o.pp > 0) in->config.parallel.pipeline = o.pp;
  if (!o.nnodes.empty() && o.num_nodes < 0) {  // --nnodes MIN:MAX runs on the first MAX nodes
    DS_ASSIGN_OR_RETURN(std::vector<NodeSpec> all, SelectNodes(o));
    DS_ASSIGN_OR_RETURN(in->range, ParseNnodes(o.nnodes, static_cast<int>(all.size())));
    o.num_nodes = in->range.max_nodes;
  }
  DS_ASSIGN_OR_RETURN(in->nodes, SelectNodes(o));
  if (!o.nnodes.empty() && in->range.max_nodes == 0) {
    DS_ASSIGN_OR_RETURN(in->range, ParseNnodes(o.nnodes, static_cast<int>(in->nodes.size())));
  }
  DS_ASSIGN_OR_RETURN(in->worker, FindBinary(o.worker, "ds-worker", "runtime/worker/ds-worker"));
  DS_ASSIGN_OR_RETURN(in->agent, FindBinary(o.agent, "ds-agent", "launcher/agent/ds-agent"));
  DS_ASSIGN_OR_RETURN(in->auto_request,
                      PrepareAutoLayout(in->nodes, in->worker, o.config, o.tp > 0 || o.pp > 0,
                                        in->range.max_nodes > 0, in->config));
  // Across nodes the layout is chosen again once the agents measured the links (RunJob); this
  // first choice, on the host's table, has every refusal said before anything starts.
  if (in->auto_request) in->auto_request->host_memory_gib = o.host_memory_gib;
  if (!in->auto_request && o.host_memory_gib > 0)
    std::fprintf(stderr,
                 "ds-launch: --host_memory shapes parallel: auto's choice only; %s gives its "
                 "layout, so it changes nothing here\n",
                 o.config.c_str());
  in->probe_links = in->auto_request && in->nodes.size() > 1;
  in->auto_base = in->config;
  if (in->auto_request)
    DS_RETURN_IF_ERROR(ApplyAutoLayout(&*in->auto_request, &in->config, &in->layout_env));
  std::vector<int> slots;  // every node as many ranks: the plans keep qgZ's first stage inside one
  for (const NodeSpec& n : in->nodes) slots.push_back(n.slots);
  in->config.parallel.node_slots = plan::UniformNodeSlots(slots);
  if (in->config.parallel.node_slots > 0)
    in->layout_env["DS_NODE_SLOTS"] = std::to_string(in->config.parallel.node_slots);
  DS_ASSIGN_OR_RETURN(in->bind, BindAddress(o, in->nodes));
  DS_ASSIGN_OR_RETURN(in->tls, TlsMaterial(o));
  for (const NodeSpec& n : in->nodes) in->world += n.slots;
  return OkStatus();
}

// The step plans, made once here (job_plans.h): every worker checks its own against its world's
// hash.
Status MakeJobPlan(LaunchInputs* in) {
  DS_ASSIGN_OR_RETURN(JobPlans plans, MakeJobPlans(in->config, in->o.config, in->nodes, in->range));
  in->plan = std::move(plans.plan);
  in->hashes = std::move(plans.hashes);
  return OkStatus();
}

// --detach: forks; the parent names the job and returns true, the child (false) goes on in a
// session of its own with its output appended to the job's launch.log.
StatusOr<bool> Detach(const JobDir& dir) {
  pid_t pid = fork();
  if (pid < 0) return ErrnoToStatus(errno, "fork");
  if (pid > 0) {
    std::printf(
        "ds-launch: job %s detached (pid %d); ds-launch status / ds-launch stop; log "
        "%s/launch.log\n",
        dir.job_id.c_str(), pid, dir.path.c_str());
    return true;
  }
  setsid();
  std::string log = dir.path + "/launch.log";
  if (!freopen(log.c_str(), "a", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(2);
  if (!freopen("/dev/null", "r", stdin)) _exit(2);
  return false;
}

// fault_tolerance's hang deadline as the coordinator's HangWatch takes it.
HangOptions HangOptionsFor(const config::FaultToleranceConfig& f) {
  HangOptions h;
  h.enabled = f.hang_detection;
  h.fixed = Ms(f.hang_timeout_s);
  h.multiple = f.hang_multiple;
  h.warmup_steps = f.hang_warmup_steps;
  h.floor = Ms(f.hang_timeout_min_s);
  h.ceiling = Ms(f.hang_timeout_max_s);
  return h;
}

// The coordinator's options: the nodes, the protocol timers and the job every rank runs.
CoordinatorOptions CoordinatorOptionsFor(const LaunchInputs& in, const std::string& token,
                                         const JobDir& dir) {
  const LaunchOptions& o = in.o;
  CoordinatorOptions co;
  co.bind_address = in.bind;
  co.token = token;
  co.tls = {o.tls_cert, o.tls_key, o.tls_ca};
  co.config.nodes = in.nodes;
  co.config.join_timeout = Ms(o.rdzv_timeout_s);
  // An elastic round closes when every node that is not lost joined, or this long after MIN did
  // (a node that died without its heartbeats timing out yet).
  co.config.last_call = in.range.elastic() ? Ms(o.rdzv_last_call_s) : milliseconds(0);
  co.config.heartbeat_interval = Ms(o.heartbeat_s);
  co.config.node_timeout = Ms(o.node_timeout_s);
  co.config.max_restarts = o.max_restarts;
  if (in.range.max_nodes > 0) {
    co.config.min_nodes = in.range.min_nodes;
    co.config.max_nodes = in.range.max_nodes;
  }
  co.config.memory_copies = in.config.fault_tolerance.in_memory_interval > 0;
  co.config.hang = HangOptionsFor(in.config.fault_tolerance);
  for (const proto::RankPlan& rank : in.plan.ranks())  // a pipeline rank's stage: its stream
    co.config.hang.streams.push_back(rank.stage());
  co.config.success_wait = milliseconds(60000);
  co.config.job_pending = in.probe_links;  // SettleLayout gives it
  co.config.job.job_id = dir.job_id;
  co.config.job.worker_argv = {in.worker, "--config", Absolute(o.config)};
  for (const auto& [flag, v] : {std::pair{"--tp", o.tp}, std::pair{"--pp", o.pp}})
    if (v > 0)
      co.config.job.worker_argv.insert(co.config.job.worker_argv.end(), {flag, std::to_string(v)});
  co.config.job.grace_ms = static_cast<int>(o.grace_s * 1000);
  co.config.job.env["DS_PLAN_HASH"] = plan::HashHex(in.plan.hash());
  if (in.range.elastic()) {
    std::string hashes;
    for (const auto& [world, hash] : in.hashes)
      hashes += (hashes.empty() ? "" : ",") + std::to_string(world) + "=" + hash;
    co.config.job.env["DS_PLAN_HASHES"] = hashes;
  }
  // Agents drop the DS_* variables of their own environment (stale rank settings); the
  // worker diagnostics a user asks for on the ds-launch command line, and the accelerator
  // choice (runtime/exec/accelerator.h) and the tests' fault injection (DS_TEST_HANG, a rank
  // that sleeps in an instruction: runtime/worker/plan_beacon.h) travel with the job.
  for (const char* name : {"DS_MEMORY_PROFILE", "DS_PROFILE_OPS", "DS_ACCELERATOR", "DS_TEST_HANG"})
    if (const char* v = std::getenv(name)) co.config.job.env[name] = v;
  for (const auto& [k, v] : in.ds_env.vars) co.config.job.env[k] = v;  // .deepspeed_env
  for (const auto& [k, v] : in.layout_env) co.config.job.env[k] = v;
  return co;
}

// SIGINT, SIGTERM and SIGHUP stop the job (OnSignal); SIGPIPE is ignored.
void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// The agent backend's options: how to start one agent per node and what they dial.
AgentBackendOptions AgentOptionsFor(const LaunchInputs& in, const std::string& token,
                                    const std::string& dial) {
  const LaunchOptions& o = in.o;
  AgentBackendOptions bo;
  bo.backend = o.backend;
  bo.agent = in.agent;
  bo.coordinator = dial;
  bo.token = token;
  bo.ssh_port = o.ssh_port;
  bo.ssh_user = o.ssh_user;
  bo.ssh_identity = o.ssh_identity;
  bo.ssh_config = o.ssh_config;
  bo.tls_bundle = in.tls.bundle;
  bo.tls_server_name = o.tls_server_name;
  bo.heartbeat_timeout_ms = static_cast<int>(std::max(6.0, 2 * o.node_timeout_s) * 1000);
  bo.probe_links = in.probe_links;
  return bo;
}

// Prints the job's output until it ends, stopping it on a signal; true when one came.
bool FollowJob(Console* console, CoordinatorState* state) {
  bool interrupted = false;
  while (true) {
    console->Pump(milliseconds(200));
    if (int sig = g_signal.exchange(0)) {
      console->ClearLine();
      std::fprintf(stderr, "ds-launch: signal %d: stopping the job\n", sig);
      state->Stop("ds-launch received signal " + std::to_string(sig)).IgnoreError();
      interrupted = true;
    }
    if (IsTerminal(state->Snapshot().phase)) break;
  }
  return interrupted;
}

// Reports how the job ended and returns ds-launch's exit code for it.
int ReportOutcome(const StatusOr<JobOutcome>& outcome, const JobDir& dir, bool interrupted) {
  if (!outcome.ok()) {
    std::fprintf(stderr, "ds-launch: %s\n", outcome.status().ToString().c_str());
    return 1;
  }
  if (outcome->phase == JobPhase::kSucceeded) {
    std::printf("ds-launch: job %s succeeded: %s (round %d, %d restart(s))\n", dir.job_id.c_str(),
                outcome->message.c_str(), outcome->round, outcome->restarts);
    return 0;
  }
  PrintFailure(*outcome);
  return outcome->phase == JobPhase::kStopped || interrupted ? 3 : 1;
}

void PrintJobLine(const LaunchInputs& in, const JobDir& dir, const std::string& dial) {
  std::printf(
      "ds-launch: job %s: %zu node(s), %d rank(s), ZeRO stage %d, plan %s, coordinator %s, "
      "launcher %s\n",
      dir.job_id.c_str(), in.nodes.size(), in.world, in.config.zero.stage,
      plan::HashHex(in.plan.hash()).c_str(), dial.c_str(), in.o.backend.c_str());
  std::fflush(stdout);
}

// parallel: auto across nodes, once the agents are up: the links measured through them, the
// layout chosen again with those rates, its plans, and the job handed to the coordinator (whose
// Joins waited for it).
Status SettleLayout(LaunchInputs* in, const std::string& token, const JobDir& dir,
                    const std::string& dial, CoordinatorState* state) {
  DS_ASSIGN_OR_RETURN(MeasuredLinks m,
                      MeasureLinks(state, in->nodes, Ms(std::max(30.0, in->o.rdzv_timeout_s)),
                                   [] { return g_signal.load() != 0; }));
  std::fputs(FormatMeasuredLinks(m).c_str(), stderr);
  in->auto_request->intra_link = m.intra_rate;
  in->auto_request->inter_link = m.inter_rate;
  config::JobConfig job = in->auto_base;
  DS_RETURN_IF_ERROR(ApplyAutoLayout(&*in->auto_request, &job, &in->layout_env));
  job.parallel.node_slots = in->config.parallel.node_slots;
  in->config = std::move(job);
  DS_RETURN_IF_ERROR(MakeJobPlan(in));
  const CoordinatorOptions co = CoordinatorOptionsFor(*in, token, dir);
  DS_RETURN_IF_ERROR(state->SetJob(co.config.job, co.config.hang.streams));
  PrintJobLine(*in, dir, dial);
  return OkStatus();
}

// Steps 2 to 4 of RunLaunch: the coordinator, one agent per node, then follows the job to its
// end; returns the exit code.
int RunJob(LaunchInputs& in, const std::string& token, const JobDir& dir) {
  // 2. The coordinator, in this process.
  const CoordinatorOptions co = CoordinatorOptionsFor(in, token, dir);
  for (const std::string& f : in.ds_env.files)
    std::printf("ds-launch: exporting the variables of %s to every rank\n", f.c_str());
  auto server = CoordinatorServer::Start(co);
  if (!server.ok()) return FailInput(server.status());
  CoordinatorServer& srv = **server;
  const std::string dial = DialAddress(srv.address());
  if (Status s = WriteCoordinatorAddress(dir, dial); !s.ok()) return FailInput(s);
  if (!in.probe_links) PrintJobLine(in, dir, dial);
  InstallSignalHandlers();

  // 3. One agent per node.
  AgentBackend agents(AgentOptionsFor(in, token, dial), &srv.state());
  if (Status s = agents.Start(in.nodes); !s.ok()) {
    std::fprintf(stderr, "ds-launch: %s\n", s.ToString().c_str());
    srv.state().Stop("agents could not be started: " + s.message()).IgnoreError();
  } else if (in.probe_links) {
    if (Status s = SettleLayout(&in, token, dir, dial, &srv.state()); !s.ok()) {
      std::fprintf(stderr, "ds-launch: %s\n", s.ToString().c_str());
      srv.state().Stop(s.message()).IgnoreError();
    }
  }

  // 4. Follow the job.
  Console console(&srv.state());
  const bool interrupted = FollowJob(&console, &srv.state());
  console.Pump(milliseconds(300));
  console.ClearLine();
  srv.state().WaitForShutdownDelivered(Ms(in.o.heartbeat_s * 3 + 1));
  agents.WaitAndStop(Ms(in.o.grace_s + 5));
  console.Pump(milliseconds(0));
  // After the agents stopped: every exit is reported, so the root cause is settled.
  auto outcome = srv.WaitForEnd(milliseconds(0));
  srv.Shutdown();
  return ReportOutcome(outcome, dir, interrupted);
}

}  // namespace

int RunLaunch(const LaunchOptions& given) {
  // 1. Validate everything before anything starts; DeepSpeed's spellings first.
  LaunchInputs in;
  if (Status s = ResolveInputs(given, &in); !s.ok()) return FailInput(s);
  if (Status s = MakeJobPlan(&in); !s.ok()) return FailInput(s);

  auto token = NewJobToken();
  if (!token.ok()) return FailInput(token.status());
  auto dir = CreateJobDir(*token);
  if (!dir.ok()) return FailInput(dir.status());
  if (!in.tls.bundle.empty())
    if (Status s = WriteTlsClient(*dir, in.tls.client); !s.ok()) return FailInput(s);
  if (in.o.detach) {
    StatusOr<bool> parent = Detach(*dir);
    if (!parent.ok()) return FailInput(parent.status());
    if (*parent) return 0;
  }
  return RunJob(in, *token, *dir);
}

}  // namespace ds::launcher
