// JobConfig: everything one training job is told by its config file.
//
// One YAML or JSON file (JSON is parsed as YAML). DeepSpeed's keys mean what they mean in
// DeepSpeed (shared/reference/deepspeed.md section 2), so an existing ds_config.json loads as
// is; our own sections (model, data, checkpoint, monitor, training, device, parallel) sit
// beside them. Unknown keys, wrong types and out-of-range values are errors that name the
// file and the full key path; DeepSpeed keys we do not support yet are accepted with one
// warning each (logged on "config" and kept in JobConfig::warnings).
//
//   DS_ASSIGN_OR_RETURN(JobConfig config, LoadJobConfig("job.yaml"));
//   DS_RETURN_IF_ERROR(ResolveBatchSizes(&config, dp_world_size));
//   int gas = config.gradient_accumulation_steps;
//
// A JobConfig is a plain value: copyable, no references to the file or to yaml-cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/config/elasticity.h"
#include "runtime/data/format/token_format.h"

namespace ds::config {

// ---- DeepSpeed blocks ----

enum class OptimizerType { kAdam, kAdamW, kSGD };

struct OptimizerConfig {
  bool specified = false;  // [reader] the file had an `optimizer` block
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;    // params.betas[0]
  double beta2 = 0.999;  // params.betas[1]
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Decoupled (AdamW) weight decay. DeepSpeed's quirk: type Adam defaults to true; type AdamW
  // is always true whatever the file says.
  bool adam_w_mode = true;
  // Adam's bias corrections 1 - beta^t (DeepSpeed's FusedAdam / CPU Adam `bias_correction`);
  // false: the raw moments (BERT pre-training configs set it).
  bool bias_correction = true;
  double momentum = 0.0;  // SGD only
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

// LR schedule stepped once per optimizer step (deepspeed.md 2.3).
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0.0;   // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;  // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;    // required by WarmupDecayLR and WarmupCosineLR
  double warmup_min_ratio = 0.0;  // WarmupCosineLR: start lr = ratio x optimizer lr
  double cos_min_ratio = 1e-4;    // WarmupCosineLR: final lr = ratio x optimizer lr
};

// fp16 with loss scaling. loss_scale 0 = dynamic, starting at 2^initial_scale_power.
// Note: DeepSpeed uses 2^32 / hysteresis 1 when the block names none of the dynamic keys; we
// use the documented defaults (2^16, 2) in every case.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;
  int initial_scale_power = 16;
  int loss_scale_window = 1000;  // clean steps before the scale doubles
  int hysteresis = 2;            // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

struct Bf16Config {
  bool enabled = false;
};

// kAuto: parallel: auto chooses none or nvme for each layout (the nvme_path given).
enum class OffloadDevice { kNone, kCpu, kNvme, kAuto };

// offload_param and offload_optimizer (deepspeed.md 2.6); each block reads only its own keys.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int buffer_count = 4;             // offload_param default 5
  int64_t buffer_size = 100000000;  // elements; offload_param only
  int64_t max_in_cpu = 1000000000;  // [warned] elements; offload_param only
  bool pin_memory = false;          // [warned]
  bool pipeline_read = false;       // offload_optimizer only
  bool pipeline_write = false;      // offload_optimizer only
  bool fast_init = false;           // [warned] offload_optimizer only
  double ratio = 1.0;  // [warned] offload_optimizer only: fraction offloaded (< 1 needs stage 3)
};

// zero_optimization (deepspeed.md 2.5). Sizes are in elements, as in DeepSpeed.
struct ZeroConfig {
  int stage = 0;  // 0 off, 1 optimizer states, 2 + gradients, 3 + parameters
  // Sizes given as "auto", resolved from the model's width by the reader (short names).
  std::vector<std::string> auto_keys;  // [reader]
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;  // unset in the file: true for stage 3, false otherwise
  int64_t sub_group_size = 1000000000;
  int64_t prefetch_bucket_size = 50000000;       // alias stage3_prefetch_bucket_size
  int64_t max_live_parameters = 1000000000;      // alias stage3_max_live_parameters
  int64_t max_reuse_distance = 1000000000;       // alias stage3_max_reuse_distance
  int64_t param_persistence_threshold = 100000;  // alias stage3_param_persistence_threshold
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param{OffloadDevice::kNone, "", 5};
  // ZeRO++ (stage 3): zero_hpz_partition_size, zero_quantized_weights (qwZ),
  // zero_quantized_gradients (qgZ).
  int hpz_partition_size = 1;
  bool quantized_weights = false;
  bool quantized_gradients = false;
};

// DeepSpeed's `aio` block: how the NVMe swapper's I/O engine (zero/aio/io_engine.h) reads and
// writes; its keys and defaults are DeepSpeed's.
struct AioConfig {
  int64_t block_size = 1048576;  // bytes per request, a multiple of 4096
  int queue_depth = 8;
  int intra_op_parallelism = 1;  // `thread_count` is its old name (a warning)
  bool single_submit = false;
  bool overlap_events = true;
  bool present = false;  // [reader] the block was given
};

// ---- our sections ----

enum class ModelFamily { kNone, kGpt2, kLlama };

// model.moe: mixture-of-experts MLPs for the generator (DeepSpeed-MoE's layer arguments; ds-model
// takes the same as flags).
struct MoeConfig {
  int num_experts = 0;  // 0: dense
  int expert_interval = 1;
  int top_k = 1;
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int min_capacity = 4;
  bool drop_tokens = true;
  bool use_residual = false;
  std::string noisy_gate_policy = "none";
  bool top2_2nd_expert_sampling = true;
  bool use_rts = true;
  double moe_loss_coeff = 0.01;
  int expert_ffn_hidden = 0;
};

// model.lora: low-rank adapters on the model's linear layers (runtime/graph/lora.h), named as
// PEFT's LoraConfig names them, or as DeepSpeed-Chat's flags (lora_dim, lora_module_name,
// lora_scaling, only_optimize_lora).
struct LoraConfig {
  bool enabled = false;
  bool dschat = false;  // given by DeepSpeed-Chat's names
  int r = 8;            // r, or lora_dim
  double alpha = 8;     // lora_alpha (PEFT: scale alpha / r), or lora_scaling (DS-Chat: / r too)
  double dropout = 0;   // lora_dropout
  bool use_rslora = false;                  // scale alpha / sqrt(r)
  std::vector<std::string> target_modules;  // PEFT's list (empty: the family's default)
  std::string target_regex;                 // PEFT's string form (a full match; "all-linear")
  std::string module_name;                  // DS-Chat's lora_module_name (a substring)
  // Only the adapters train: PEFT always; DS-Chat with only_optimize_lora (its default trains
  // the base weights too).
  bool freeze_base = true;
  std::string save_adapter;  // after training: the adapters as PEFT saves them, into this folder
  std::string adapter;       // a PEFT adapter folder to start from (PEFT's names only)
};

// Either a graph file or the settings of the built-in generator.
struct ModelConfig {
  std::string graph;  // path to a .pb / .pbtxt graph; empty = use the generator settings
  // A Hugging Face model folder (config.json and safetensors): the architecture from its
  // config.json (runtime/hf), the initial weights from its files; family stays kNone.
  std::string hf;
  bool hf_dropout_set = false;  // model.dropout given with model.hf: overrides config.json's
  ModelFamily family = ModelFamily::kNone;  // kNone when `graph` is given or no model section
  int n_layer = 12;
  int n_embd = 768;
  int n_head = 12;
  int n_kv_head = 0;  // 0 = n_head (no grouped-query attention)
  int vocab_size = 50257;
  int max_seq_len = 1024;
  int ffn_hidden = 0;  // 0 = the family's default (gpt2: 4 x n_embd)
  double dropout = 0.0;
  double rope_theta = 10000.0;  // llama only
  bool tie_embeddings = true;
  std::string head = "lm";  // "lm" or "reward" (DeepSpeed-Chat's reward model: a value head)
  // Left-padded batches: the graph takes per-sequence left pads (kState "pad.left", which the
  // caller fills; RLHF's step 3 sets it for prompts of several lengths).
  bool pad_mask = false;
  MoeConfig moe;
  LoraConfig lora;
};

// data.format: auto (by header magic), ds, uint16, llmc; the readers' own enum.
using TokenFormat = data::TokenFileFormat;

struct DataConfig {
  std::string train;       // token file
  std::string validation;  // token file; empty = no evaluation
  config::TokenFormat format = TokenFormat::kAuto;
  int seq_len = 0;  // 0 = model.max_seq_len
  bool shuffle = true;
  uint64_t seed = 1234;  // unset in the file: the job's seed
  // Megatron indexed datasets instead of token files: --data-path's entries (one prefix,
  // weight-prefix pairs, or several prefixes), the split string, and the train samples the
  // datasets are built for (0 = train_iters x train_batch_size, as Megatron derives them).
  // Training reads split 0, evaluation split 1.
  std::vector<std::string> path;
  std::string split = "969, 30, 1";
  int64_t train_samples = 0;
  // Packed documents (Megatron's flags, token files or datasets alike): positions restart
  // after each eod_token, tokens attend only within their document, no loss where the input
  // is eod_token (runtime/data/document_masks.h). eod_token is required with any of them.
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  int64_t eod_token = -1;  // SFT: the end token appended after each answer
  // Supervised fine-tuning pairs (runtime/data/sft_loader.h): the prompt and answer indexed
  // datasets `ds-data preprocess --json-keys prompt chosen` writes, optionally a validation
  // pair, and DeepSpeed-Chat's length limits. The loss is on the answers only.
  struct Sft {
    std::string prompt, answer;
    std::string validation_prompt, validation_answer;
    int64_t max_prompt_seq_len = 0;  // 0 = no limit but seq_len
    int64_t max_answer_seq_len = 0;
    bool left_padding = false;  // padding: left (needs model.pad_mask); default right
  } sft;

  bool megatron() const { return !path.empty(); }
  bool supervised() const { return !sft.prompt.empty(); }
  bool has_train() const { return !train.empty() || megatron() || supervised(); }
  bool has_validation() const {
    return !validation.empty() || megatron() || !sft.validation_prompt.empty();
  }
};

struct CheckpointConfig {
  std::string dir;            // empty = no checkpoints
  int64_t save_interval = 0;  // optimizer steps between saves; 0 = only at the end
  int keep_last = 0;          // 0 = keep all
  std::string load;           // "" = start fresh, "latest" = newest in dir, else a checkpoint path
};

// DeepSpeed's tensorboard / csv_monitor block: rank 0 writes under output_path/job_name.
struct MonitorTargetConfig {
  bool enabled = false;
  std::string output_path;                    // "" = the working directory
  std::string job_name = "DeepSpeedJobName";  // DeepSpeed's default
};

// DeepSpeed's flops_profiler block (deepspeed/profiling/config.py defaults).
struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int module_depth = -1;  // -1: every depth
  int top_modules = 1;
  bool detailed = true;
  std::string output_file;  // "" = stdout
  double recompute_fwd_factor = 0.0;
};

// DeepSpeed's comms_logger block (deepspeed/comm/config.py defaults).
struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;
};

// fault_tolerance: what the coordinator does about a job that stops moving. hang_timeout: auto
// (the default: hang_multiple x the p99 step time once hang_warmup_steps steps are measured,
// clamped to [hang_timeout_min, hang_timeout_max]; the maximum until then), a number of
// seconds, or off. When no rank moves past it the job ends (or restarts under --max_restarts)
// with a report naming the ranks that hang (launcher/coordinator/hang.h). in_memory_interval N
// > 0: every N steps each rank's model states are copied into the memory of its node's agent and
// of the next node's (runtime/worker/memory_copier.h), and a restart resumes from the newest
// step every rank has a copy of, instead of from the disk checkpoint; 0: off.
struct FaultToleranceConfig {
  bool hang_detection = true;
  double hang_timeout_s = 0;  // 0: auto
  double hang_multiple = 5;
  int hang_warmup_steps = 3;
  double hang_timeout_min_s = 10;
  double hang_timeout_max_s = 600;
  int64_t in_memory_interval = 0;
};

struct MonitorConfig {
  MonitorTargetConfig tensorboard, csv_monitor;  // DeepSpeed's blocks (top level)
  FlopsProfilerConfig flops_profiler;
  CommsLoggerConfig comms_logger;
  std::string csv;            // metrics CSV path; empty = none
  int64_t log_interval = 1;   // optimizer steps between log lines
  int64_t eval_interval = 0;  // optimizer steps between evaluations; 0 = never
  int64_t eval_iters = 20;    // validation micro-batches per evaluation
};

enum class DeviceType { kCpu, kCuda };

struct DeviceConfig {
  DeviceType type = DeviceType::kCpu;
  int threads = 0;  // compute threads per rank; 0 = the cores the launcher gave the rank
  // The CPU's matrix products (kernels/cpu/gemm.h): "auto" (default: oneDNN, OpenBLAS for the
  // shapes oneDNN is slow on), "onednn" or "openblas".
  std::string cpu_gemm = "auto";
  // bf16 mixed precision on the CPU: the linear layers' products with bf16 inputs ("bf16",
  // oneDNN; emulated and slow without AVX512_BF16 / AMX) or fp32 products of the widened bf16
  // weights ("fp32"); "auto" (default) picks bf16 where the CPU multiplies it natively.
  std::string cpu_bf16_matmul = "auto";
};

// parallel: {tensor, pipeline, expert, sequence_parallel}; DeepSpeed's tensor_parallel.autotp_size
// is `tensor` too. The planner refuses pipeline sizes above 1 until its pipeline builders land.
struct ParallelConfig {
  // `parallel: auto`: ds-launch picks the layout (tensor, pipeline, ZeRO stage, micro-batch x
  // accumulation unless given, recompute unless given) with the planner's cost model
  // (runtime/planner/auto_layout.h) and every worker applies it (DS_LAYOUT).
  bool auto_layout = false;
  // [worker] the chosen layout came with a predicted time per instruction kind: the step runner
  // times its instructions and rank 0 reports them beside it after the third step.
  bool layout_predicted = false;
  // [worker] ranks per node where every node has as many (ds-launch passes it from the hostfile
  // as DS_NODE_SLOTS; 0: unknown): qgZ's first all-to-all stays inside a node.
  int node_slots = 0;
  int tensor = 1;
  int pipeline = 1;
  int expert = 1;   // expert-parallel size (DeepSpeed-MoE's ep_size): divides the dp size
  int ulysses = 1;  // DeepSpeed-Ulysses' sequence_parallel_size: divides the dp size
  bool sequence_parallel = false;
  // PR-MoE (use_residual) under expert parallelism: the dense branch runs while the tokens'
  // all-to-all is in flight (Megatron's --moe-shared-expert-overlap;
  // parallel/expert/moe_overlap.h).
  bool moe_shared_expert_overlap = true;
  bool pipeline_given = false;  // [reader] parallel.pipeline was set (pipeline.stages must agree)
};

// pipeline: {schedule, virtual_stages, partition_method} (runtime/plan/pipe_schedule.h and
// pipe_stages.h say what each means); the pipeline size is parallel.pipeline (DeepSpeed's
// pipeline.stages sets it too).
struct PipelineConfig {
  std::string schedule = "1f1b";  // "1f1b", "interleaved" or "zb-h1" (checked by the planner)
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved)
  std::string partition_method = "parameters";  // parameters | uniform | type:REGEX
};

// training.recompute: none | selective | full, or DeepSpeed's activation_checkpointing block
// (present: full, unless training.recompute says otherwise).
struct RecomputeConfig {
  std::string mode = "none";  // "none", "selective", "full"
  bool given = false;         // [reader] training.recompute or activation_checkpointing present
  // activation_checkpointing.partition_activations: full recompute's block inputs kept as 1/tp
  // slices over the tensor-parallel group, all-gathered before each block's recompute.
  bool partition_activations = false;
  // activation_checkpointing.cpu_checkpointing: on a device, full recompute's block inputs are
  // kept in host memory between their forward and their block's recompute.
  bool cpu_checkpointing = false;
};

// hybrid_engine (DeepSpeed's names and defaults): the RLHF actor's rollouts. inference_tp_size:
// groups of that many ranks generate together from tensor-parallel slices of the actor, cut
// tp_gather_partition_size blocks at a time; max_out_tokens: prompt + answer tokens at most.
struct HybridEngineConfig {
  int max_out_tokens = 512;
  int inference_tp_size = 1;
  int tp_gather_partition_size = 8;
  // false (ZeRO-3): generation gathers tp_gather_partition_size blocks at a time in every
  // forward instead of the whole model once per rollout.
  bool pin_parameters = true;
};

struct JobConfig {
  std::string source;  // file name used in messages

  // Batch-size triad; 0 = not given. ResolveBatchSizes fills in the missing ones.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;

  int64_t steps_per_print = 0;     // 0 = not given (DeepSpeed's None): no step=... lines
  double gradient_clipping = 0.0;  // global-norm clip; 0 disables
  bool wall_clock_breakdown = false;
  std::string communication_data_type;  // "", "fp32", "fp16", "bf16"; "" = follow precision
  uint64_t seed = 1234;

  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  ZeroConfig zero;
  AioConfig aio;

  ModelConfig model;
  DataConfig data;
  CheckpointConfig checkpoint;
  MonitorConfig monitor;
  FaultToleranceConfig fault_tolerance;
  ElasticityConfig elasticity;  // DeepSpeed's: one global batch for a range of world sizes
  int64_t train_iters = 0;      // training.train_iters: total optimizer steps; 0 = not given
  RecomputeConfig recompute;
  DeviceConfig device;
  ParallelConfig parallel;
  PipelineConfig pipeline;
  // DeepSpeed's hybrid_engine, for an RLHF actor: its rollouts (runtime/rlhf/ppo_step.h).
  HybridEngineConfig hybrid_engine;
  // rlhf: {chat: chat.yaml, step: all}: ds-worker runs ds-chat's steps (runtime/rlhf) on the
  // launched ranks instead of training this job's model; empty chat: train as usual.
  struct Rlhf {
    std::string chat;
    std::string step = "all";
  } rlhf;

  // One line per accepted-but-unsupported key ("job.yaml: \"wandb\" is ...").
  std::vector<std::string> warnings;  // [reader]
  // Keys given as "auto" (HuggingFace's placeholder) that are derived here: the batch triad
  // (ResolveBatchSizes says what it chose) and the ZeRO bucket sizes (from the model's width).
  std::vector<std::string> auto_keys;  // [reader]  // [reader]
};

// Reads and validates `path` (YAML or JSON). NotFound if it cannot be read; InvalidArgument for
// syntax errors, unknown keys, wrong types and out-of-range values, each message starting
// with the path. Logs one warning per unsupported DeepSpeed key.
StatusOr<JobConfig> LoadJobConfig(const std::string& path);

// Same, from text; `source_name` stands for the file in messages.
StatusOr<JobConfig> ParseJobConfig(const std::string& text, const std::string& source_name);

// DeepSpeed's batch triad: train_batch_size = micro x gas x dp_world_size. Any two given
// derive the third; train only -> gas 1; micro only -> gas 1. InvalidArgument when the numbers
// disagree, do not divide, or only gas (or nothing) is given; the message states the rule with
// the numbers. On success all three fields are positive.
Status ResolveBatchSizes(JobConfig* config, int dp_world_size);

// Names used in files and logs ("AdamW", "WarmupCosineLR"; TokenFileFormatName for formats).
const char* OptimizerTypeName(OptimizerType type);
const char* SchedulerTypeName(SchedulerType type);

}  // namespace ds::config
