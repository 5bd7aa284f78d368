#include "runtime/worker/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "parallel/comm/communicator.h"
#include "parallel/comm/loopback_communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/data/data_loader.h"
#include "runtime/exec/accelerator.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/plan/plan_config.h"
#include "runtime/plan/plan_view.h"
#include "runtime/planner/plan_builder.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/cpu_matmul.h"
#include "runtime/worker/pipe_compute.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/train_batches.h"
#include "zero/device_states.h"
#include "zero/optimizer.h"
#include "zero/optimizer_swapper.h"
#include "zero/plan/bucket_arena.h"
#include "zero/shard_layout.h"

extern "C" void openblas_set_num_threads(int);

namespace ds::worker {
namespace {

zero::OptimizerOptions ToOptimizerOptions(const config::OptimizerConfig& c) {
  zero::OptimizerOptions o;
  switch (c.type) {
    case config::OptimizerType::kAdamW:
      o.type = zero::OptimizerOptions::Type::kAdamW;
      break;
    case config::OptimizerType::kAdam:
      o.type = c.adam_w_mode ? zero::OptimizerOptions::Type::kAdamW
                             : zero::OptimizerOptions::Type::kAdam;
      break;
    case config::OptimizerType::kSGD:
      o.type = zero::OptimizerOptions::Type::kSgd;
      break;
  }
  o.lr = static_cast<float>(c.lr);
  o.beta1 = static_cast<float>(c.beta1);
  o.beta2 = static_cast<float>(c.beta2);
  o.eps = static_cast<float>(c.eps);
  o.weight_decay = static_cast<float>(c.weight_decay);
  o.momentum = static_cast<float>(c.momentum);
  o.bias_correction = c.bias_correction;
  return o;
}

optim::LrScheduleOptions ToScheduleOptions(const config::JobConfig& c) {
  optim::LrScheduleOptions o;
  const config::SchedulerConfig& s = c.scheduler;
  switch (s.type) {
    case config::SchedulerType::kNone:
      o.type = "";
      break;
    case config::SchedulerType::kWarmupLR:
      o.type = "WarmupLR";
      break;
    case config::SchedulerType::kWarmupDecayLR:
      o.type = "WarmupDecayLR";
      break;
    case config::SchedulerType::kWarmupCosineLR:
      o.type = "WarmupCosineLR";
      break;
  }
  o.base_lr = c.optimizer.lr;
  o.warmup_min_lr = s.warmup_min_lr;
  o.warmup_max_lr = s.warmup_max_lr;
  o.warmup_num_steps = s.warmup_num_steps;
  o.warmup_type = s.warmup_type == config::WarmupType::kLog ? "log" : "linear";
  o.total_num_steps = s.total_num_steps;
  o.warmup_min_ratio = s.warmup_min_ratio;
  o.cos_min_ratio = s.cos_min_ratio;
  return o;
}

optim::LossScalerOptions ToScalerOptions(const config::Fp16Config& f) {
  optim::LossScalerOptions o;
  o.enabled = f.enabled;
  o.loss_scale = f.loss_scale;
  o.initial_scale_power = f.initial_scale_power;
  o.loss_scale_window = f.loss_scale_window;
  o.hysteresis = f.hysteresis;
  o.consecutive_hysteresis = f.consecutive_hysteresis;
  o.min_loss_scale = f.min_loss_scale;
  return o;
}

bool MemoryProfileRequested() {
  const char* v = std::getenv("DS_MEMORY_PROFILE");
  return v && *v && std::string(v) != "0";
}

}  // namespace

int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

Trainer::Trainer(const config::JobConfig& config, Graph graph, parallel::Communicator* comm,
                 DeviceMemory* device, parallel::Communicator* host_comm)
    : config_(config),
      graph_(std::move(graph)),
      device_memory_(device),
      comm_(comm),
      host_comm_(host_comm) {
  part_ = std::make_unique<planner::RankGraph>();
}
Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::JobConfig& config, Graph graph,
                                                   parallel::Communicator* comm,
                                                   DeviceMemory* device,
                                                   parallel::Communicator* host_comm) {
  std::unique_ptr<Trainer> t(new Trainer(config, std::move(graph), comm, device, host_comm));
  DS_RETURN_IF_ERROR(t->Build());
  return t;
}

int64_t Trainer::tokens_per_step() const {
  return config_.train_micro_batch_size_per_gpu * config_.gradient_accumulation_steps * seq_;
}

Status Trainer::Build() {
  const std::string& src = config_.source;
  AdoptComms();
  auto pc = plan::PlanConfigFromJob(config_);
  if (!pc.ok()) return pc.status().WithPrefix(src);
  auto topo = plan::TopologyFor(comm_->size(), *pc);
  if (!topo.ok()) return topo.status().WithPrefix(src);
  DS_RETURN_IF_ERROR(ResolveRun(*topo));
  DType model_dtype = DType::kF32;
  if (config_.bf16.enabled) model_dtype = DType::kBF16;
  if (config_.fp16.enabled) model_dtype = DType::kF16;
  DS_RETURN_IF_ERROR(BuildModelStates(*topo, *pc, model_dtype));
  exec::ExecutorOptions eo{config_.train_micro_batch_size_per_gpu, seq_, true, device_memory_};
  eo.matmul = CpuMatmulDtype(config_);
  DS_RETURN_IF_ERROR(BuildExecutor(*topo, *pc, &eo));
  DS_RETURN_IF_ERROR(BuildRunner(eo));
  LogModel(model_dtype);
  return OkStatus();
}

// Without a communicator the trainer is one rank of its own (a loopback group of 1).
void Trainer::AdoptComms() {
  if (!comm_) {
    own_comm_ = std::move(parallel::LoopbackCommunicator::CreateGroup(1)[0]);
    comm_ = own_comm_.get();
  }
  if (!host_comm_) host_comm_ = comm_;
  world_comm_ = comm_;
  world_host_comm_ = host_comm_;
  world_rank_ = comm_->rank();
}

// The run's shape from the job and the topology: the batch triad, the device, the threads, the
// sequence length and the number of steps; errors name the job file and the key.
Status Trainer::ResolveRun(const plan::Topology& topo) {
  const std::string& src = config_.source;
  // The batch triad counts the data-parallel ranks only (Ulysses' ranks share micro-batches);
  // its errors name the job file already.
  DS_RETURN_IF_ERROR(config::ResolveBatchSizes(&config_, topo.dp / topo.sp));
  // A given memory stands for a GPU; on the CPU there is none.
  auto device = exec::JobDevice(config_.device.type == config::DeviceType::kCuda, device_memory_,
                                &own_device_memory_);
  if (!device.ok()) return device.status().WithPrefix(src + ": device.type cuda");
  device_memory_ = *device;
  if (const int threads = config_.device.threads; threads > 0) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  int64_t max_seq = graph_.config.count("max_seq_len") ? graph_.config.at("max_seq_len") : 0;
  seq_ = config_.data.seq_len > 0 ? config_.data.seq_len : max_seq;
  if (seq_ <= 0)
    return InvalidArgumentError(src + ": data.seq_len is not set and the graph has no max_seq_len");
  if (max_seq > 0 && seq_ > max_seq)
    return InvalidArgumentError(src + ": data.seq_len " + std::to_string(seq_) +
                                " exceeds the model's max_seq_len " + std::to_string(max_seq));
  total_steps_ = config_.train_iters;
  if (total_steps_ <= 0 && config_.scheduler.total_num_steps > 0)
    total_steps_ = config_.scheduler.total_num_steps;
  if (total_steps_ <= 0) return InvalidArgumentError(src + ": training.train_iters is not set");
  return OkStatus();
}

// The plan of the whole model, this rank's part of it (the plan's cut), its groups, and the
// model states the plan lays out: the ParamStore sharded, the optimizer, the NVMe swapper.
Status Trainer::BuildModelStates(const plan::Topology& topo, const plan::PlanConfig& pc,
                                 DType model_dtype) {
  const std::string& src = config_.source;
  DS_RETURN_IF_ERROR(planner::CheckFrozenLayout(graph_, topo).WithPrefix(src));
  DS_RETURN_IF_ERROR(BuildPlan());
  DS_RETURN_IF_ERROR(CutGraph(pc).WithPrefix(src));
  // The model states on the device (the plan's rule): the host ParamStore holds sparse copies.
  const bool states_on_device = device_memory_ && pc.states_on_device;
  params_ =
      std::make_unique<zero::ParamStore>(graph_, model_dtype, /*sparse_host=*/states_on_device);
  if (plan_->model().flat_elements() != params_->total_elements())
    return InternalError("the plan's flat layout (" +
                         std::to_string(plan_->model().flat_elements()) +
                         " elements) differs from the parameter store's (" +
                         std::to_string(params_->total_elements()) + ")");
  DS_RETURN_IF_ERROR(BuildFrozen());
  DS_RETURN_IF_ERROR(CreateGroups().WithPrefix(src));
  // Before the executor: it keeps views of the flat buffers Shard may replace.
  params_->Shard(zero::LayoutFor(*plan_, world_rank_, params_->total_elements()));
  optimizer_ =
      std::make_unique<zero::Optimizer>(ToOptimizerOptions(config_.optimizer), params_.get());
  return BuildSwapper().WithPrefix(src);
}

// The executor of the rank's graph (a pipeline: its chunk 0) with its recompute segments, and on
// a device with the model states there, the device states it reads the parameters from.
Status Trainer::BuildExecutor(const plan::Topology& topo, const plan::PlanConfig& pc,
                              exec::ExecutorOptions* eo) {
  const std::string& src = config_.source;
  // zb-h1's plan runs each backward in two halves (BACKWARD_INPUT, BACKWARD_WEIGHT).
  const auto& mine = plan_->ranks(world_rank_).instructions();
  eo->split_backward = std::any_of(mine.begin(), mine.end(), [](const proto::Instruction& i) {
    return i.kind() == proto::Instruction::BACKWARD_INPUT;
  });
  auto split = SetRecompute(0, eo);
  if (!split.ok()) return split.status().WithPrefix(src);
  if (pc.partition_activations) ReportPartitionedActivations(topo, *split);
  DS_RETURN_IF_ERROR(BuildDeviceStates(eo).WithPrefix(src));
  const Graph& runs = part_->chunks.empty() ? graph_ : part_->chunks[0];  // a pipeline: chunk 0
  eo->frozen = frozen_.get();
  DS_RETURN_IF_ERROR(BindStateInputs(runs, eo->batch, eo).WithPrefix(src));
  auto executor = exec::Executor::Create(runs, params_.get(), *eo);
  if (!executor.ok()) return executor.status().WithPrefix(src);
  executor_ = std::move(executor).value();
  if (device_states_)
    DS_LOG_INFO("worker",
                "forward, backward and the optimizer run on {}; model states there: {:.1f} MiB",
                device_memory_->name(), device_states_->bytes() / double(1 << 20));
  else if (device_memory_)
    DS_LOG_INFO("worker",
                "forward and backward run on {}; the optimizer on the host (offload_optimizer)",
                device_memory_->name());
  return OkStatus();
}

// The plan's states_on_device on a device: the model states there (ZeRO-3 gathers units into an
// arena placed from the plan's live ranges), the executors reading the parameters and writing
// the gradients there. Nothing to do when the plan keeps them on the host.
Status Trainer::BuildDeviceStates(exec::ExecutorOptions* eo) {
  if (!device_memory_ || !plan_->settings().states_on_device()) return OkStatus();
  std::vector<zero::DeviceParamBlock> blocks;
  const zero::BucketArena arena = zero::AssignGatherArena(*plan_, world_rank_);
  for (const zero::BucketBlock& b : arena.blocks)
    blocks.push_back(
        {b.flat_begin, b.count, b.arena_offset, plan_->partition().units(b.bucket).persistent()});
  DS_ASSIGN_OR_RETURN(device_states_,
                      zero::DeviceStates::Create(device_memory_, params_.get(), optimizer_.get(),
                                                 std::move(blocks), arena.elements));
  zero::DeviceStates* on_device = device_states_.get();
  if (params_->params_partitioned())
    eo->device_param_at = [on_device](int64_t i) { return on_device->ParamAt(i); };
  else
    eo->device_params = on_device->params();
  eo->device_grad_at = [on_device](int64_t i) { return on_device->GradAt(i); };
  return OkStatus();
}

// The step's other parts (LR schedule, loss scaler, batches, a pipeline's compute, the comms
// logger) and the StepRunner over the plan.
Status Trainer::BuildRunner(const exec::ExecutorOptions& eo) {
  const std::string& src = config_.source;
  auto schedule = optim::LrSchedule::Create(ToScheduleOptions(config_));
  if (!schedule.ok()) return schedule.status().WithPrefix(src);
  schedule_ = std::make_unique<optim::LrSchedule>(*schedule);
  scaler_ = std::make_unique<optim::LossScaler>(ToScalerOptions(config_.fp16));
  batches_ = std::make_unique<TrainBatches>(src);
  if (config_.data.has_train()) DS_RETURN_IF_ERROR(OpenTrainData(eo.batch));
  DS_RETURN_IF_ERROR(BindDocumentMasks(eo.batch));
  micro_flops_ = executor_->forward_flops() + executor_->backward_flops();
  DS_RETURN_IF_ERROR(BuildPipelineCompute(eo).WithPrefix(src));
  StepParts parts;
  parts.compute = pipe_compute_.get();
  parts.executor = executor_.get();
  parts.params = params_.get();
  parts.optimizer = optimizer_.get();
  parts.data = batches_.get();
  parts.scaler = scaler_.get();
  parts.schedule = schedule_.get();
  parts.comm = comm_;
  parts.host_comm = host_comm_;
  parts.max_grad_norm = static_cast<float>(config_.gradient_clipping);
  parts.seed = config_.seed;
  parts.groups = group_by_name_;
  parts.memory_profile = MemoryProfileRequested();
  parts.time_instructions = config_.wall_clock_breakdown || config_.parallel.layout_predicted;
  if (config_.monitor.comms_logger.enabled) {
    const config::CommsLoggerConfig& cl = config_.monitor.comms_logger;
    comms_ = std::make_unique<CommsLogger>(
        CommsLoggerOptions{cl.verbose && world_rank_ == 0, cl.prof_all, cl.debug, cl.prof_ops});
    parts.comms = comms_.get();
  }
  parts.device = device_states_.get();
  parts.swapper = swapper_.get();
  if (device_states_) {
    DeviceMemory* memory = device_memory_;
    parts.synchronize = [memory]() { return memory->Synchronize(); };
  }
  auto runner = StepRunner::Create(plan_.get(), world_rank_, parts);
  if (!runner.ok()) return runner.status().WithPrefix(src);
  runner_ = std::move(runner).value();
  return OkStatus();
}

void Trainer::LogModel(DType model_dtype) const {
  DS_LOG_INFO("worker",
              "model {} ({:.2f}M params, {} nodes), precision {}, batch {} = micro {} x accum {}, "
              "seq {}, {} steps, {} threads",
              graph_.name, params_->num_parameters() / 1e6, graph_.nodes.size(),
              DTypeName(model_dtype), config_.train_batch_size,
              config_.train_micro_batch_size_per_gpu, config_.gradient_accumulation_steps, seq_,
              total_steps_, omp_get_max_threads());
  if (!device_memory_ && model_dtype != DType::kF32)  // what 16-bit precision means on the host
    DS_LOG_INFO(
        "worker",
        "{} on the CPU: parameters and gradients are stored in {}, activations in {}, the "
        "linear layers' products {}, with fp32 master weights and optimizer states{}",
        model_dtype == DType::kBF16 ? "bf16" : "fp16", DTypeName(model_dtype),
        executor_->bf16_activations() == 0
            ? std::string("fp32")
            : fmt::format("bf16 where a product writes them ({} tensors, {:.1f} MiB; the residual "
                          "stream in fp32)",
                          executor_->bf16_activations(),
                          executor_->bf16_activation_bytes() / double(1 << 20)),
        CpuMatmulDtype(config_) == DType::kBF16
            ? "with bf16 inputs and fp32 accumulation"
            : "in fp32 on the widened weights (device.cpu_bf16_matmul)",
        model_dtype == DType::kF16 ? " and the fp16 loss scaling (fp16 runs as bf16's fp32 path)"
                                   : "");
  DS_LOG_INFO("worker",
              "memory: params {:.1f} MiB, activations {:.1f} MiB, activation grads {:.1f} MiB",
              params_->total_elements() *
                  (4.0 /* master */ + 8.0 /* Adam m, v */ + DTypeSize(model_dtype) /* grads */ +
                   (model_dtype == DType::kF32 ? 0.0 : DTypeSize(model_dtype)) /* 16-bit copy */) /
                  (1 << 20),
              executor_->activation_bytes() / double(1 << 20),
              executor_->activation_grad_bytes() / double(1 << 20));
}

Status Trainer::Initialize() {
  const std::string& load = config_.checkpoint.load;
  if (!load.empty()) {
    std::string path = load == "latest" ? config_.checkpoint.dir : load;
    if (load == "latest" && !HasLatestCheckpoint(path)) {
      DS_LOG_INFO("worker", "no checkpoint under {} yet: starting from step 0", path);
    } else {
      DS_RETURN_IF_ERROR(LoadCheckpoint(path));
      runner_->ReleaseGatheredParams();  // stage 3: only the persistent units stay
      return StoreSwappedStates();
    }
  }
  DS_RETURN_IF_ERROR(InitializeWeights());
  // model.lora.adapter: a PEFT adapter to start from (after the base weights are in place).
  if (!config_.model.lora.adapter.empty()) return LoadAdapter(config_.model.lora.adapter);
  return OkStatus();
}

// Step 0's weights: model.hf's folder, or the initializers' seeded draws.
Status Trainer::InitializeWeights() {
  if (!config_.model.hf.empty()) return InitializeFromHf();
  if (frozen_) frozen_->Initialize(graph_, config_.seed);  // the base weights draw as unfrozen
  if (swapper_)
    return InitializeStreaming(
        [this](int slot, float* dst, int64_t whole, const zero::ParamStore::Ranges&, int64_t) {
          params_->DrawInitial(graph_, config_.seed, slot, dst, whole);
          return OkStatus();
        });
  params_->Initialize(graph_, config_.seed, {}, init_slicer_.get());
  runner_->ReleaseGatheredParams();
  if (device_states_) DS_RETURN_IF_ERROR(device_states_->Upload());
  return OkStatus();
}

Status Trainer::BuildPlan() {
  auto pc = plan::PlanConfigFromJob(config_);
  if (!pc.ok()) return pc.status().WithPrefix(config_.source);
  auto topo_or = plan::TopologyFor(world_comm_->size(), *pc);
  if (!topo_or.ok()) return topo_or.status().WithPrefix(config_.source);
  const plan::Topology topo = *topo_or;
  // The plan places the collectives on the memory this communicator works on.
  pc->device_collectives = pc->states_on_device && comm_->device_buffers();
  auto made = planner::MakePlan(graph_, topo, *pc);  // the whole model, every rank's cut
  if (!made.ok()) return made.status().WithPrefix(config_.source + ": plan");
  plan_ = std::make_unique<proto::Plan>(std::move(made).value());
  plan::SelectStage(plan::StageOf(*plan_, world_rank_), plan_.get());  // a pipeline: this stage's
  return OkStatus();
}

StatusOr<StepMetrics> Trainer::TrainStep() {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const double scale = scaler_->scale();
  DS_ASSIGN_OR_RETURN(StepResult s, runner_->Run(step_));
  StepMetrics r;
  r.loss = s.loss;
  r.moe_aux = s.moe_aux;
  r.lr = s.lr;
  r.grad_norm = s.grad_norm;
  r.loss_scale = scale;
  r.skipped = s.skipped;
  if (r.skipped)
    DS_LOG_WARN("worker", "step {}: fp16 gradient overflow at loss scale {}: step skipped",
                step_ + 1, scale);
  ++step_;
  r.step = step_;
  r.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.tokens_per_s = tokens_per_step() / (r.step_ms / 1e3);
  const int64_t gas = config_.gradient_accumulation_steps;
  r.tflops = micro_flops_ * gas / (r.step_ms / 1e3) / 1e12;
  r.peak_rss_bytes = PeakRssBytes();
  if (pipe_compute_) r.compute_ms = pipe_compute_->TakeComputeMs();
  if (swapper_) ReportSwaps(&r);
  return r;
}

std::string Trainer::MemoryReport() const {
  int64_t acts = 0, grads = 0;  // every activation slot's executor (a pipeline stage has several)
  auto add = [&](const exec::Executor& e) {
    acts += e.activation_bytes() + e.input_bytes();
    grads += e.activation_grad_bytes();
  };
  add(*executor_);
  for (const auto& e : slot_executors_) add(*e);
  int64_t planned_acts = 0, planned_grads = 0;
  for (const proto::RankPlan& r : plan_->ranks()) {
    if (r.rank() != world_rank_) continue;
    for (const proto::KindBytes& k : r.memory().peak_by_kind()) {
      if (k.kind() == proto::PlanBuffer::ACTIVATIONS) planned_acts = k.bytes();
      if (k.kind() == proto::PlanBuffer::ACTIVATION_GRADS) planned_grads = k.bytes();
    }
  }
  constexpr double kMiB = 1 << 20;
  return runner_->MemoryReport() +
         fmt::format(
             "; activations {:.2f} MiB, activation gradients {:.2f} MiB, planned {:.2f} "
             "and {:.2f} MiB",
             acts / kMiB, grads / kMiB, planned_acts / kMiB, planned_grads / kMiB);
}

PlanBeacon& Trainer::beacon() { return runner_->beacon(); }

void Trainer::SetNodeTiming(bool on) {
  executor_->SetNodeTiming(on);
  for (const auto& e : slot_executors_) e->SetNodeTiming(on);
}

const std::map<std::string, double>& Trainer::InstructionProfile() const {
  return runner_->InstructionProfile();
}

}  // namespace ds::worker
