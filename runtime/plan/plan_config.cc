#include "runtime/plan/plan_config.h"

#include <cstdlib>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/plan/parallel_grid.h"

namespace ds::plan {

const char* PipeScheduleName(PipeScheduleKind kind) {
  switch (kind) {
    case PipeScheduleKind::kInterleaved:
      return "interleaved";
    case PipeScheduleKind::kZbH1:
      return "zb-h1";
    case PipeScheduleKind::k1F1B:
      break;
  }
  return "1f1b";
}

bool ParsePipeSchedule(const std::string& text, PipeScheduleKind* kind) {
  for (PipeScheduleKind k :
       {PipeScheduleKind::k1F1B, PipeScheduleKind::kInterleaved, PipeScheduleKind::kZbH1})
    if (text == PipeScheduleName(k)) {
      *kind = k;
      return true;
    }
  return false;
}

namespace {

// communication_data_type: the dtype of the gradients' collectives (the model's by default).
Status SetCommDtype(const config::JobConfig& job, PlanConfig* c) {
  c->comm_dtype = c->model_dtype;
  const std::string& comm = job.communication_data_type;
  if (comm == "fp32") {
    c->comm_dtype = DType::kF32;
  } else if (comm == "fp16") {
    c->comm_dtype = DType::kF16;
  } else if (comm == "bf16") {
    c->comm_dtype = DType::kBF16;
  } else if (!comm.empty()) {
    return InvalidArgumentError(job.source + ": communication_data_type \"" + comm +
                                "\" is not fp32, fp16 or bf16");
  }
  return OkStatus();
}

// zero_optimization: buckets, ZeRO-3's prefetch and persistence, the NVMe swappers' settings.
void SetZero(const config::ZeroConfig& z, PlanConfig* c) {
  c->reduce_bucket_size = z.reduce_bucket_size;
  c->allgather_bucket_size = z.allgather_bucket_size;
  c->overlap_comm = z.overlap_comm;
  c->reduce_scatter = z.reduce_scatter;
  c->prefetch_bucket_size = z.prefetch_bucket_size;
  c->max_live_parameters = z.max_live_parameters;
  c->max_reuse_distance = z.max_reuse_distance;
  c->param_persistence_threshold = z.param_persistence_threshold;
  const config::OffloadConfig& oo = z.offload_optimizer;
  c->optimizer_nvme = oo.device == config::OffloadDevice::kNvme;
  c->sub_group_size = z.sub_group_size;
  c->swap_buffer_count = oo.buffer_count;
  c->pipeline_read = oo.pipeline_read;
  c->pipeline_write = oo.pipeline_write;
  const config::OffloadConfig& op = z.offload_param;
  c->param_nvme = z.stage == 3 && op.device == config::OffloadDevice::kNvme;
  c->param_buffer_count = op.buffer_count;
  c->param_buffer_size = op.buffer_size;
  c->hpz_partition_size = z.hpz_partition_size;
  c->quantized_weight_bits = z.quantized_weights ? 8 : 0;      // DeepSpeed's qwZ: int8
  c->quantized_gradient_bits = z.quantized_gradients ? 4 : 0;  // qgZ: int4
}

// The optimizer's states per parameter, clipping, and where the model states live.
void SetStates(const config::JobConfig& job, PlanConfig* c) {
  switch (job.optimizer.type) {
    case config::OptimizerType::kAdam:
    case config::OptimizerType::kAdamW:
      c->optimizer_states = 2;
      break;
    case config::OptimizerType::kSGD:
      c->optimizer_states = job.optimizer.momentum != 0.0 ? 1 : 0;
      break;
  }
  c->gradient_clipping = job.gradient_clipping > 0.0;
  c->on_device = job.device.type == config::DeviceType::kCuda;
  c->states_on_device = job.device.type == config::DeviceType::kCuda &&
                        job.zero.offload_optimizer.device == config::OffloadDevice::kNone;
  const char* accelerator = std::getenv("DS_ACCELERATOR");
  c->device_collectives =
      c->states_on_device && !(accelerator && std::string(accelerator) == "host");
}

}  // namespace

StatusOr<PlanConfig> PlanConfigFromJob(const config::JobConfig& job) {
  PlanConfig c;
  c.tensor = job.parallel.tensor;
  c.pipeline = job.parallel.pipeline;
  c.expert = job.parallel.expert;
  c.ulysses = job.parallel.ulysses;
  c.sequence_parallel = job.parallel.sequence_parallel;
  c.moe_overlap = job.parallel.moe_shared_expert_overlap;
  if (!ParseRecomputeMode(job.recompute.mode, &c.recompute))
    return InvalidArgumentError(job.source + ": training.recompute \"" + job.recompute.mode +
                                "\" must be none, selective or full");
  c.partition_activations = job.recompute.partition_activations;
  c.cpu_checkpointing = job.recompute.cpu_checkpointing &&
                        job.device.type == config::DeviceType::kCuda &&
                        c.recompute == RecomputeMode::kFull;
  if (!ParsePipeSchedule(job.pipeline.schedule, &c.pipe_schedule))
    return InvalidArgumentError(job.source + ": pipeline.schedule \"" + job.pipeline.schedule +
                                "\" must be 1f1b, interleaved or zb-h1");
  c.virtual_stages = job.pipeline.virtual_stages;
  c.partition_method = job.pipeline.partition_method;
  c.in_memory_interval = job.fault_tolerance.in_memory_interval;
  c.node_slots = job.parallel.node_slots;
  c.elasticity = job.elasticity;
  c.stage = job.zero.stage;
  c.train_batch_size = job.train_batch_size;
  c.micro_batch_size = job.train_micro_batch_size_per_gpu;
  c.gradient_accumulation_steps = job.gradient_accumulation_steps;
  c.seq_len = job.data.seq_len > 0 ? job.data.seq_len : job.model.max_seq_len;
  c.model_dtype = job.bf16.enabled ? DType::kBF16 : job.fp16.enabled ? DType::kF16 : DType::kF32;
  DS_RETURN_IF_ERROR(SetCommDtype(job, &c));
  SetStates(job, &c);
  SetZero(job.zero, &c);
  const std::string& products = job.device.cpu_bf16_matmul;
  c.host_bf16_activations =
      !c.on_device && c.model_dtype == DType::kBF16 &&
      (products == "bf16" || (products == "auto" && HostCpuIsa() == CpuIsa::kAvx512Bf16));
  return c;
}

int UniformNodeSlots(const std::vector<int>& slots_per_node) {
  if (slots_per_node.empty()) return 0;
  for (int s : slots_per_node)
    if (s != slots_per_node.front()) return 0;
  return slots_per_node.front();
}

StatusOr<Topology> TopologyFor(int world, const PlanConfig& config) {
  DS_ASSIGN_OR_RETURN(ParallelGrid grid, ParallelGrid::Create(world, config.tensor, config.pipeline,
                                                              config.expert, config.ulysses));
  return Topology{world, grid.dp(), grid.tp(), grid.pp(), grid.ep(), grid.sp()};
}

}  // namespace ds::plan
