// ds-worker: trains one rank. Standalone it is the whole single-process trainer:
//
//   ds-worker --config configs/examples/addition.yaml
//   ds-worker --config job.yaml --eval            # validation loss (+ task accuracy)
//
// Prints a progress line, writes per-step metrics as CSV (monitor.csv), evaluates every
// monitor.eval_interval steps and checkpoints every checkpoint.save_interval steps.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <chrono>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/progress_reporter.h"
#include "launcher/kv/grpc_kv_store.h"
#include "launcher/kv/grpc_store.h"
#include "parallel/comm/gloo_communicator.h"
#include "proto/plan.pb.h"
#include "runtime/exec/accelerator.h"
#include "runtime/exec/cuda_loader.h"
#include "runtime/plan/plan_config.h"
#include "runtime/plan/plan_hash.h"

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/core/dtype.h"
#include "runtime/plan/model_loader.h"
#include "runtime/rlhf/chat_config.h"
#include "runtime/rlhf/chat_steps.h"
#include "runtime/worker/blas_setup.h"
#include "runtime/worker/comms_logger.h"
#include "runtime/worker/copy_stores.h"
#include "runtime/worker/cpu_matmul.h"
#include "runtime/worker/flops_profiler.h"
#include "runtime/worker/host_calibration.h"
#include "runtime/worker/layout_report.h"
#include "runtime/worker/plan_beacon.h"
#include "runtime/worker/progress.h"
#include "runtime/worker/rank_env.h"
#include "runtime/worker/rank_start.h"
#include "runtime/worker/step_monitor.h"
#include "runtime/worker/task_eval.h"
#include "runtime/worker/train_loop.h"
#include "runtime/worker/trainer.h"
#include "zero/aio/nvme_path.h"

namespace ds::worker {
namespace {

struct Flags {
  std::string config;
  int64_t steps = 0;
  int threads = 0;
  int tp = 0, pp = 0;  // override parallel.tensor / parallel.pipeline (ds-launch --tp/--pp)
  bool eval = false;
  std::string csv;
  std::string export_init;
  std::string init_weights;
  std::string log_level;
};

// A client of the job's coordinator as this rank's agent is one: its address, and under mutual
// TLS the agent's CA and client identity (the token is read by the caller).
launcher::ClientOptions CoordinatorClientOptions(const RankEnv& env) {
  launcher::ClientOptions o;
  o.address = env.coordinator;
  o.tls_ca_path = env.tls_ca;
  o.tls_cert_path = env.tls_cert;
  o.tls_key_path = env.tls_key;
  o.tls_server_name = env.tls_server_name;
  return o;
}

// Progress and plan-position reports to the job's coordinator (when started by ds-agent), from
// a thread every 500 ms and at the last step (launcher/coordinator/progress_reporter.h); null,
// with a warning saying why, when the coordinator cannot be reached.
std::unique_ptr<launcher::ProgressReporter> MakeReporter(const RankEnv& env, PlanBeacon* beacon) {
  if (!env.launched || env.coordinator.empty()) return nullptr;
  std::ifstream in(env.token_file);
  launcher::ClientOptions o = CoordinatorClientOptions(env);
  o.rpc_timeout = std::chrono::milliseconds(2000);
  if (!std::getline(in, o.token)) {
    DS_LOG_WARN("worker", "no job token in {}: progress is not reported", env.token_file);
    return nullptr;
  }
  auto client = launcher::CoordinatorClient::Create(o);
  if (!client.ok()) {
    DS_LOG_WARN("worker", "{}", client.status().ToString());
    return nullptr;
  }
  launcher::ProgressReport first;
  first.rank = env.rank;
  first.round = env.round;
  auto where = [beacon]() -> std::optional<launcher::PlanPosition> {
    const BeaconSample s = beacon->Sample();
    return launcher::PlanPosition{s.step, s.instruction, s.kind, s.group, s.bytes};
  };
  return std::make_unique<launcher::ProgressReporter>(std::move(client).value(), first, where);
}

// DS_TEST_HANG=RANK:STEP:KIND (fault injection in tests): on rank RANK, the first KIND
// instruction of step STEP sleeps until the process is killed (plan_beacon.h).
Status ArmTestHang(const RankEnv& env, PlanBeacon* beacon) {
  const char* v = std::getenv("DS_TEST_HANG");
  if (!v || !*v) return OkStatus();
  int rank = -1;
  long long step = 0;
  char kind[64] = {0};
  proto::Instruction::Kind k;
  if (std::sscanf(v, "%d:%lld:%63s", &rank, &step, kind) != 3 ||
      !proto::Instruction::Kind_Parse(kind, &k))
    return InvalidArgumentError(std::string("DS_TEST_HANG=") + v +
                                ": expected RANK:STEP:KIND, e.g. 1:5:FORWARD");
  if (rank == env.rank) beacon->ArmHang(step, k);
  return OkStatus();
}

void Report(launcher::ProgressReporter* reporter, const StepMetrics& m, int64_t total) {
  if (!reporter) return;
  launcher::ProgressReport r;
  r.step = m.step;
  r.total_steps = total;
  r.loss = m.loss;
  r.tokens_per_s = m.tokens_per_s;
  r.rss_bytes = m.peak_rss_bytes;
  reporter->Update(r, /*send_now=*/m.step == total);
}

// The data-parallel group of a launched job, bootstrapped through the coordinator's KV store
// (keys of this round): NCCL when the plan keeps the model states on the GPU (device.type
// cuda without offload_optimizer), so collectives run on the device's buffers; else, or when
// this build has no NCCL plugin (the same on every rank; a warning says why), Gloo over TCP
// with this node's advertised address, the device's buffers staged through the host. An NCCL
// that loads but fails is an error, not a fallback: the ranks must agree on the backend.
// Beside NCCL a Gloo group of the same ranks carries the collectives on host memory (norms,
// the loss, checkpoint votes), as PyTorch jobs keep a gloo group beside nccl.
struct DataParallelGroup {
  std::unique_ptr<launcher::CoordinatorClient> client;
  std::unique_ptr<launcher::GrpcStore> store;
  std::unique_ptr<DeviceMemory> memory;  // NCCL: this rank's GPU (the trainer borrows it)
  std::unique_ptr<launcher::GrpcStore> nccl_grpc;
  std::unique_ptr<launcher::GrpcKvStore> nccl_store;
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<parallel::Communicator> host_comm;  // beside NCCL: Gloo
};

Status JoinNccl(const RankEnv& env, std::chrono::milliseconds timeout, DataParallelGroup* g) {
  g->nccl_grpc = std::make_unique<launcher::GrpcStore>(g->client.get(), env.round, "nccl", timeout);
  g->nccl_store = std::make_unique<launcher::GrpcKvStore>(g->nccl_grpc.get());
  DS_ASSIGN_OR_RETURN(g->comm, exec::LoadNcclCommunicator(g->memory.get(), env.rank, env.world_size,
                                                          "dp", g->nccl_store.get(), timeout));
  DS_LOG_INFO("worker", "joined the data-parallel group: rank {} of {} over NCCL on {}", env.rank,
              env.world_size, g->memory->name());
  return OkStatus();
}

StatusOr<std::unique_ptr<DataParallelGroup>> JoinDataParallelGroup(
    const RankEnv& env, const config::JobConfig& config) {
  auto g = std::make_unique<DataParallelGroup>();
  std::ifstream in(env.token_file);
  launcher::ClientOptions o = CoordinatorClientOptions(env);
  if (!std::getline(in, o.token))
    return FailedPreconditionError("no job token in " + env.token_file);
  DS_ASSIGN_OR_RETURN(g->client, launcher::CoordinatorClient::Create(o));
  const auto timeout = std::chrono::milliseconds(60000);
  DS_ASSIGN_OR_RETURN(plan::PlanConfig pc, plan::PlanConfigFromJob(config));
  if (pc.states_on_device) {
    DS_ASSIGN_OR_RETURN(g->memory, exec::OpenAccelerator(0));  // the agent pins one GPU per rank
    if (g->memory->device() == Device::kCuda) {
      // The launcher's plan puts the data-parallel collectives on device buffers (the plan's
      // device_collectives): every rank needs NCCL. Falling back to Gloo here would change this
      // rank's plan alone (and stage every bucket through the host).
      Status nccl = JoinNccl(env, timeout, g.get());
      if (nccl.code() == StatusCode::kNotFound)
        return nccl.WithPrefix("rank " + std::to_string(env.rank) +
                               ": the plan reduces on device buffers (NCCL) but libds_nccl.so is "
                               "missing (build with the CUDA toolkit), or keep the model states on "
                               "the host with offload_optimizer");
      if (!nccl.ok()) return nccl.WithPrefix("rank " + std::to_string(env.rank));
    }
  }
  g->store = std::make_unique<launcher::GrpcStore>(g->client.get(), env.round, "dp", timeout);
  parallel::GlooOptions go;
  go.rank = env.rank;
  go.size = env.world_size;
  const char* addr = std::getenv("DS_NODE_ADDR");
  go.hostname = addr && *addr ? addr : "127.0.0.1";
  go.timeout = timeout;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<parallel::GlooCommunicator> gloo,
                      parallel::GlooCommunicator::Create(go, g->store.get()));
  DS_LOG_INFO("worker", "{} rank {} of {} over Gloo ({})",
              g->comm ? "host-memory collectives:" : "joined the data-parallel group:", env.rank,
              env.world_size, go.hostname);
  if (g->comm)
    g->host_comm = std::move(gloo);
  else
    g->comm = std::move(gloo);
  return g;
}

// One training step; the flops profiler's step (rank 0) with every node timed and its report.
StatusOr<StepMetrics> Step(Trainer* trainer, bool on_device) {
  const config::FlopsProfilerConfig& fp = trainer->config().monitor.flops_profiler;
  if (!fp.enabled || trainer->step() + 1 != fp.profile_step) return trainer->TrainStep();
  const bool bf16 =
      CpuMatmulDtype(trainer->config()) == DType::kBF16 && kernels::cpu::HasNativeBf16Gemm();
  const auto [peak, source] =
      on_device ? std::pair<double, std::string>{0, ""} : MeasureCpuGemmPeak(bf16);
  return ProfiledStep(trainer, peak, source, stdout);
}

// DeepSpeed-Chat's steps (runtime/rlhf/chat_steps.h) over this job's ranks: `step` or all.
Status RunChat(const std::string& chat, const std::string& step, parallel::Communicator* comm) {
  DS_ASSIGN_OR_RETURN(rlhf::ChatConfig c, rlhf::LoadChatConfig(chat));
  struct Step {
    const char* name;
    Status (*run)(const rlhf::ChatConfig&, parallel::Communicator*, std::ostream&);
  };
  for (const Step& s :
       {Step{"sft", rlhf::RunSft}, Step{"reward", rlhf::RunReward}, Step{"ppo", rlhf::RunPpo}}) {
    if (step != "all" && step != s.name) continue;
    if (!comm || comm->rank() == 0) std::cout << "== ds-chat step " << s.name << std::endl;
    DS_RETURN_IF_ERROR(s.run(c, comm, std::cout).WithPrefix(std::string("step ") + s.name));
  }
  return OkStatus();
}

// The job as this rank runs it: rank 0 alone writes metrics (checkpoints are written by rank 0
// after every rank took part in gathering sharded state, Trainer::SaveCheckpoint), the command
// line's overrides, and this node's swap directories checked before any step.
StatusOr<config::JobConfig> LoadRankConfig(const Flags& f, const RankEnv& env) {
  DS_ASSIGN_OR_RETURN(config::JobConfig config, config::LoadJobConfig(f.config));
  if (env.rank != 0) {
    config.monitor.csv.clear();
    config.monitor.tensorboard.enabled = config.monitor.csv_monitor.enabled = false;
    config.monitor.flops_profiler.enabled = false;
    config.steps_per_print = 0;
  }
  if (env.resume && !config.checkpoint.dir.empty()) config.checkpoint.load = "latest";
  if (f.steps > 0) config.train_iters = f.steps;
  if (f.threads > 0) config.device.threads = f.threads;
  if (f.tp > 0) config.parallel.tensor = f.tp;
  if (f.pp > 0) config.parallel.pipeline = f.pp;
  if (config.parallel.auto_layout && (f.tp > 0 || f.pp > 0))
    return InvalidArgumentError(f.config + ": --tp / --pp contradict parallel: auto");
  DS_RETURN_IF_ERROR(ApplyAutoLayout(f.config, env.world_size, &config));
  DS_RETURN_IF_ERROR(ApplyNodeSlots(f.config, env.world_size, &config));
  if (!f.csv.empty()) config.monitor.csv = f.csv;
  if (f.eval && config.checkpoint.load.empty()) config.checkpoint.load = "latest";
  if (f.eval && config.train_iters <= 0) config.train_iters = 1;
  for (const auto& [key, o] :
       {std::pair{"zero_optimization.offload_optimizer.nvme_path", &config.zero.offload_optimizer},
        std::pair{"zero_optimization.offload_param.nvme_path", &config.zero.offload_param}})
    if (o->device == config::OffloadDevice::kNvme)
      DS_RETURN_IF_ERROR(zero::CheckSwapDir(key, o->nvme_path).WithPrefix(f.config));
  return config;
}

// --eval: the loaded checkpoint's validation loss and task score.
Status EvaluateOnly(Trainer* trainer, const Flags& f, const config::JobConfig& config) {
  if (trainer->step() == 0)
    return NotFoundError(f.config + ": no checkpoint to evaluate (checkpoint.load \"" +
                         config.checkpoint.load + "\" under \"" + config.checkpoint.dir + "\")");
  const config::JobConfig& c = trainer->config();
  if (c.data.has_validation()) {
    DS_ASSIGN_OR_RETURN(double val, trainer->Evaluate(c.monitor.eval_iters));
    std::printf("eval: step %lld validation loss %.4f\n", static_cast<long long>(trainer->step()),
                val);
  }
  return EvaluateTask(*trainer).status();
}

// The model graph, checked against a Hugging Face folder's weights before any allocation.
StatusOr<Graph> LoadGraph(const config::JobConfig& config) {
  DS_ASSIGN_OR_RETURN(Graph graph, plan::LoadModelGraph(config));
  if (!config.model.hf.empty()) {
    DS_ASSIGN_OR_RETURN(ModelSpec spec, plan::HfModelSpec(config));
    DS_RETURN_IF_ERROR(ckpt::CheckHfWeights(config.model.hf, spec, graph));
  }
  return graph;
}

// After the trainer is made: --init-weights, --export-init (then stop), --eval (then stop), or
// the training run with its closing summary.
Status RunTrainer(Trainer* trainer, const Flags& f, const RankEnv& env,
                  const config::JobConfig& config) {
  DS_RETURN_IF_ERROR(InitializeRank(trainer, env, config));
  if (!f.init_weights.empty()) {
    if (trainer->step() > 0)
      return InvalidArgumentError("--init-weights with a resumed checkpoint (step " +
                                  std::to_string(trainer->step()) + "): pick one");
    DS_RETURN_IF_ERROR(trainer->LoadWeights(f.init_weights));
  }
  const config::JobConfig& c = trainer->config();
  if (!f.export_init.empty()) {
    DS_RETURN_IF_ERROR(trainer->ExportWeights(f.export_init));
    std::printf("ds-worker: wrote weights of step %lld to %s\n",
                static_cast<long long>(trainer->step()), f.export_init.c_str());
    return OkStatus();
  }
  if (f.eval) return EvaluateOnly(trainer, f, config);
  RunRecord run;
  DS_RETURN_IF_ERROR(ArmTestHang(env, &trainer->beacon()));
  std::unique_ptr<launcher::ProgressReporter> reporter = MakeReporter(env, &trainer->beacon());
  const bool on_device = c.device.type == config::DeviceType::kCuda;
  std::unique_ptr<MemoryCopier> copier = MakeCopier(env, c.fault_tolerance.in_memory_interval);
  LoopHooks hooks{[&] { return Step(trainer, on_device); },
                  [&](const StepMetrics& m) { Report(reporter.get(), m, trainer->total_steps()); },
                  copier.get()};
  DS_RETURN_IF_ERROR(TrainLoop(trainer, hooks, &run));
  if (copier) {
    copier->Drain();
    std::printf("%s\n", copier->Summary().c_str());
  }
  if (!c.model.lora.save_adapter.empty())
    DS_RETURN_IF_ERROR(trainer->ExportAdapter(c.model.lora.save_adapter));
  if (trainer->comms_logger() && env.rank == 0 && !trainer->comms_logger()->empty())
    std::printf("comms_logger (rank 0):\n%s", trainer->comms_logger()->Summary().c_str());
  PrintPipelineIdle(run.pipe_ms);
  PrintRunSummary(trainer, env.rank, run);
  return OkStatus();
}

Status Run(const Flags& f) {
  DS_ASSIGN_OR_RETURN(RankEnv env, ReadRankEnv());
  if (env.launched) SetLogRank(env.rank);
  // Under Yama ptrace_scope 1 only an ancestor may attach to us: name the agent (our parent) so
  // the eu-stack or gdb it starts for a hang report can read our stacks. Kernels without Yama
  // refuse the call with EINVAL; nothing else depends on it, so its error is ignored.
  if (env.launched) prctl(PR_SET_PTRACER, getppid(), 0, 0, 0);
  DS_ASSIGN_OR_RETURN(config::JobConfig config, LoadRankConfig(f, env));
  DS_LOG_INFO("worker", "OpenBLAS kernels: {}", BlasCoreDescription());
  DS_LOG_INFO("worker", "CPU GEMM: {}", ApplyCpuGemm(config));
  DS_ASSIGN_OR_RETURN(Graph graph, LoadGraph(config));
  std::unique_ptr<DataParallelGroup> group;
  if (env.launched && env.world_size > 1 && !f.eval) {
    DS_ASSIGN_OR_RETURN(group, JoinDataParallelGroup(env, config));
  }
  if (!config.rlhf.chat.empty())  // ds-chat's steps on these ranks (rlhf.chat)
    return RunChat(config.rlhf.chat, config.rlhf.step, group ? group->comm.get() : nullptr);
  DS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                      Trainer::Create(config, std::move(graph), group ? group->comm.get() : nullptr,
                                      group ? group->memory.get() : nullptr,
                                      group ? group->host_comm.get() : nullptr));
  if (!f.eval) DS_RETURN_IF_ERROR(CheckPlanHash(*trainer, env.rank, env.world_size));
  return RunTrainer(trainer.get(), f, env, config);
}

}  // namespace
}  // namespace ds::worker

int main(int argc, char** argv) {
  // A peer that dies closes its sockets; a write to one must fail in the collective (and name
  // the peer) instead of killing this rank with SIGPIPE, which would read as a second root cause.
  signal(SIGPIPE, SIG_IGN);
  ds::worker::EnsureBlasKernels(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "calibrate")
    return ds::worker::CalibrateCommand(argc - 1, argv + 1);
  CLI::App app{"ds-worker: train one rank (standalone, or started by ds-agent)"};
  ds::worker::Flags f;
  app.add_option("--config,-c", f.config, "job config (YAML or JSON)")->required();
  app.add_option("--steps", f.steps, "override training.train_iters");
  app.add_option("--threads", f.threads, "compute threads (default: device.threads or all cores)");
  app.add_option("--tp", f.tp, "override parallel.tensor")->check(CLI::PositiveNumber);
  app.add_option("--pp", f.pp, "override parallel.pipeline")->check(CLI::PositiveNumber);
  app.add_flag("--eval", f.eval, "load the latest checkpoint and evaluate instead of training");
  app.add_option("--csv", f.csv, "override monitor.csv");
  app.add_option("--export-init", f.export_init,
                 "write the initial (or loaded) weights as safetensors and exit");
  app.add_option("--init-weights", f.init_weights,
                 "start from these weights (safetensors with our names, e.g. from ds-ckpt import)");
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!f.log_level.empty()) ds::SetLogLevel(f.log_level);
  ds::Status s = ds::worker::Run(f);
  if (!s.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "ds-worker: error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
