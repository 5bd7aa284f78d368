// PlanConfig and Topology: the planner's inputs besides the graph. A PlanConfig is the part of a
// JobConfig that shapes one optimizer step (ZeRO knobs as DeepSpeed's zero_optimization block,
// batch triad, precision, optimizer state count); PlanConfigFromJob derives it.
//
//   DS_ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig("job.yaml"));
//   DS_ASSIGN_OR_RETURN(PlanConfig config, PlanConfigFromJob(job));
//   DS_ASSIGN_OR_RETURN(proto::Plan plan, planner::MakePlan(graph, {4, 4}, config));
//
// Plain values; copyable.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/core/dtype.h"
#include "runtime/graph/recompute.h"

namespace ds::plan {

// pipeline.schedule (the orders: parallel/pipeline/pipe_schedule.h).
enum class PipeScheduleKind { k1F1B, kInterleaved, kZbH1 };
// "1f1b", "interleaved", "zb-h1"; ParsePipeSchedule accepts exactly those.
const char* PipeScheduleName(PipeScheduleKind kind);
bool ParsePipeSchedule(const std::string& text, PipeScheduleKind* kind);

struct Topology {
  int world = 1;
  int dp = 1;  // data-parallel size: world / (tp x pp)
  int tp = 1;
  int pp = 1;
  int ep = 1;  // expert parallelism: consecutive runs of ep dp ranks split the experts
  int sp = 1;  // Ulysses: consecutive runs of sp dp ranks split each sequence
};

struct PlanConfig {
  // parallel: {tensor, pipeline, sequence_parallel} (tensor_parallel.autotp_size is tensor).
  int tensor = 1;
  int pipeline = 1;
  int expert = 1;   // parallel.expert: the expert-parallel size (divides the dp size)
  int ulysses = 1;  // parallel.ulysses: Ulysses' sequence-parallel size (divides the dp size)
  bool sequence_parallel = false;
  // parallel.moe_shared_expert_overlap: PR-MoE's overlap windows (moe_overlap.h) are opened;
  // false runs the same node order with synchronous all-to-alls.
  bool moe_overlap = true;
  // pipeline: {schedule, virtual_stages, partition_method} (pipe_schedule.h,
  // pipe_stages.h); micro-batches per pipeline flush = gradient_accumulation_steps.
  PipeScheduleKind pipe_schedule = PipeScheduleKind::k1F1B;
  int virtual_stages = 1;
  std::string partition_method = "parameters";
  int64_t in_memory_interval = 0;       // fault_tolerance's: steps between in-memory copies
  config::ElasticityConfig elasticity;  // DeepSpeed's: the batch for every size (elasticity.h)
  // A pipeline stage's ZeRO plan (pipe_plan.h): each micro-batch's BACKWARD is one instruction,
  // its gradient reductions after it (the pipeline schedule places the backward).
  bool whole_backward = false;
  // training.recompute / activation_checkpointing (runtime/graph/recompute.h).
  RecomputeMode recompute = RecomputeMode::kNone;
  // activation_checkpointing.partition_activations: the checkpoints PartitionCheckpoints picks
  // (full recompute's block inputs, replicated over tp) kept as 1/tp slices.
  bool partition_activations = false;
  // activation_checkpointing.cpu_checkpointing with the activations on a device (device.type
  // cuda) and full recompute: the block inputs kept in host memory (OffloadCheckpoints).
  bool cpu_checkpointing = false;
  int stage = 0;  // ZeRO stage: 0 off, 1 optimizer states, 2 + gradients, 3 + parameters
  // Batch triad as in the job file (0 = not given); MakePlan resolves it for topology.dp with
  // DeepSpeed's rule train = micro x gas x dp (ResolveBatchSizes).
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t seq_len = 1;              // tokens per sequence
  DType model_dtype = DType::kF32;  // f32, bf16 or f16 (params and grads)
  DType comm_dtype = DType::kF32;   // gradient collectives (DeepSpeed: follows precision)
  int optimizer_states = 2;         // fp32 states per parameter: Adam 2, SGD+momentum 1
  bool gradient_clipping = false;   // clip at the (always planned) GRAD_NORM_REDUCE
  bool states_on_device = false;    // model states and the optimizer step on the accelerator
  bool on_device = false;           // device.type cuda: forward and backward run on the accelerator
  // A bf16 step on the host whose products take bf16 inputs (device.cpu_bf16_matmul "bf16", or
  // "auto" on a CPU with AVX512_BF16 under DS_CPU_ISA): the executor stores activations and
  // their gradients in bf16 where the host kernels take them (runtime/graph/host_bf16.h).
  bool host_bf16_activations = false;
  // With states_on_device: the data-parallel collectives work on device buffers (NCCL), else
  // they stage through the host (Gloo). PlanConfigFromJob: true unless DS_ACCELERATOR=host (the
  // host-emulated device has no NCCL); a trainer sets it from its communicator.
  bool device_collectives = false;
  // zero_optimization, in elements (defaults as DeepSpeed's code).
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;
  bool reduce_scatter = true;  // stages 1-2: reduce-scatter grads (false: all-reduce)
  int64_t prefetch_bucket_size = 50000000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  int64_t param_persistence_threshold = 100000;
  // offload_optimizer device nvme: the optimizer states (and a separate fp32 master) live in
  // swap files, stepped sub-group by sub-group through swap_buffer_count buffers.
  bool optimizer_nvme = false;
  int64_t sub_group_size = 1000000000;  // elements
  int swap_buffer_count = 4;
  bool pipeline_read = false;
  bool pipeline_write = false;
  // offload_param device nvme (stage 3): the 16-bit parameter shard lives in a swap file; units
  // are read in before their gathers through param_buffer_count buffers of param_buffer_size
  // elements. Needs optimizer_nvme (the 16-bit copy is written back per sub-group).
  bool param_nvme = false;
  int param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
  // ZeRO++ (stage 3; zero/README.md Note [ZeRO++]): hpZ's secondary partition over consecutive
  // runs of hpz_partition_size dp ranks (1: none); qwZ's parameter gathers and qgZ's gradient
  // all-to-alls in signed integers of these bits, one fp32 scale per block (0: full precision).
  int hpz_partition_size = 1;
  int quantized_weight_bits = 0;
  int quantized_gradient_bits = 0;
  // Ranks per node where every node has as many (0: unknown; parallel.node_slots): without hpZ,
  // qgZ's first all-to-all runs over one node's dp ranks (zero::QgzLocalSize).
  int node_slots = 0;
};

// The PlanConfig of `job`: zero_optimization knobs, the batch triad as given, seq_len
// (data.seq_len, else model.max_seq_len), bf16/fp16/f32, communication_data_type, optimizer state
// count and clipping. InvalidArgument for a communication_data_type it cannot map.
StatusOr<PlanConfig> PlanConfigFromJob(const config::JobConfig& job);

// The ranks of each node when every node has as many (PlanConfig::node_slots), else 0.
int UniformNodeSlots(const std::vector<int>& slots_per_node);

// The topology of `world` ranks under `config`'s tensor and pipeline sizes (dp = world / (tp x
// pp), runtime/plan/parallel_grid.h); InvalidArgument naming the sizes when they do not fit.
StatusOr<Topology> TopologyFor(int world, const PlanConfig& config);

}  // namespace ds::plan
