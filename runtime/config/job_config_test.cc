#include "runtime/config/job_config.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

namespace ds::config {
namespace {

// Every warning of a parse, one per line (for find and INFO).
std::string AllWarnings(const JobConfig& c) {
  std::string all;
  for (const std::string& w : c.warnings) all += w + "\n";
  return all;
}

// The same job, once in YAML and once in JSON.
constexpr const char* kYaml = R"(
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 2
steps_per_print: 5
gradient_clipping: 1.0
seed: 42
optimizer:
  type: adamw
  params: {lr: 6.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}
scheduler:
  type: WarmupCosineLR
  params: {total_num_steps: 5000, warmup_num_steps: 100, warmup_type: linear}
bf16: {enabled: true}
zero_optimization:
  stage: 1
  reduce_bucket_size: 5e8
model:
  family: gpt2
  n_layer: 4
  n_embd: 128
  n_head: 4
  vocab_size: 50304
  max_seq_len: 256
data:
  train: data/train.tok
  validation: data/val.tok
  format: auto
  seq_len: 128
checkpoint: {dir: ckpt, save_interval: 500, keep_last: 3, load: latest}
monitor: {csv: metrics.csv, log_interval: 10, eval_interval: 250, eval_iters: 50}
training: {train_iters: 5000}
device: {type: cpu, threads: 2}
parallel: {tensor: 1, pipeline: 1}
)";

constexpr const char* kJson = R"({
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "steps_per_print": 5,
  "gradient_clipping": 1.0,
  "seed": 42,
  "optimizer": {"type": "adamw",
                "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"total_num_steps": 5000, "warmup_num_steps": 100,
                           "warmup_type": "linear"}},
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8},
  "model": {"family": "gpt2", "n_layer": 4, "n_embd": 128, "n_head": 4, "vocab_size": 50304,
            "max_seq_len": 256},
  "data": {"train": "data/train.tok", "validation": "data/val.tok", "format": "auto",
           "seq_len": 128},
  "checkpoint": {"dir": "ckpt", "save_interval": 500, "keep_last": 3, "load": "latest"},
  "monitor": {"csv": "metrics.csv", "log_interval": 10, "eval_interval": 250, "eval_iters": 50},
  "training": {"train_iters": 5000},
  "device": {"type": "cpu", "threads": 2},
  "parallel": {"tensor": 1, "pipeline": 1}
})";

void CheckJob(const JobConfig& c) {
  CHECK(c.train_batch_size == 0);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 2);
  CHECK(c.steps_per_print == 5);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.seed == 42);
  CHECK(c.optimizer.specified);
  CHECK(c.optimizer.type == OptimizerType::kAdamW);
  CHECK(c.optimizer.lr == Approx(6e-4));
  CHECK(c.optimizer.beta2 == Approx(0.95));
  CHECK(c.optimizer.weight_decay == Approx(0.1));
  CHECK(c.optimizer.adam_w_mode);
  CHECK(c.scheduler.type == SchedulerType::kWarmupCosineLR);
  CHECK(c.scheduler.total_num_steps == 5000);
  CHECK(c.scheduler.warmup_num_steps == 100);
  CHECK(c.scheduler.warmup_type == WarmupType::kLinear);
  CHECK(c.scheduler.cos_min_ratio == Approx(1e-4));
  CHECK(c.bf16.enabled);
  CHECK_FALSE(c.fp16.enabled);
  CHECK(c.zero.stage == 1);
  CHECK(c.zero.reduce_bucket_size == 500000000);
  CHECK_FALSE(c.zero.overlap_comm);
  CHECK(c.model.family == ModelFamily::kGpt2);
  CHECK(c.model.n_layer == 4);
  CHECK(c.model.n_embd == 128);
  CHECK(c.model.vocab_size == 50304);
  CHECK(c.model.tie_embeddings);
  CHECK(c.data.train == "data/train.tok");
  CHECK(c.data.format == config::TokenFormat::kAuto);
  CHECK(c.data.seq_len == 128);
  CHECK(c.data.shuffle);
  CHECK(c.data.seed == 42);  // follows the job seed
  CHECK(c.checkpoint.dir == "ckpt");
  CHECK(c.checkpoint.keep_last == 3);
  CHECK(c.checkpoint.load == "latest");
  CHECK(c.monitor.csv == "metrics.csv");
  CHECK(c.monitor.eval_interval == 250);
  CHECK(c.train_iters == 5000);
  CHECK(c.device.type == DeviceType::kCpu);
  CHECK(c.device.threads == 2);
  CHECK(c.warnings.empty());
}

TEST_CASE("JobConfig: YAML and JSON give the same job", "[config]") {
  StatusOr<JobConfig> yaml = ParseJobConfig(kYaml, "job.yaml");
  REQUIRE(yaml.ok());
  CheckJob(*yaml);
  StatusOr<JobConfig> json = ParseJobConfig(kJson, "job.json");
  REQUIRE(json.ok());
  CheckJob(*json);
  CHECK(json->source == "job.json");
}

TEST_CASE("JobConfig: defaults follow DeepSpeed", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig("train_batch_size: 8\n", "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->seed == 1234);
  CHECK(c->gradient_clipping == 0.0);
  CHECK_FALSE(c->optimizer.specified);
  CHECK(c->scheduler.type == SchedulerType::kNone);
  CHECK(c->fp16.initial_scale_power == 16);
  CHECK(c->fp16.loss_scale_window == 1000);
  CHECK(c->fp16.hysteresis == 2);
  CHECK(c->fp16.min_loss_scale == 1.0);
  CHECK(c->zero.stage == 0);
  CHECK(c->zero.allgather_bucket_size == 500000000);
  CHECK(c->zero.offload_param.buffer_count == 5);
  CHECK(c->zero.offload_optimizer.buffer_count == 4);
  CHECK(c->model.family == ModelFamily::kNone);
  CHECK(c->data.shuffle);
  CHECK(c->data.seed == 1234);
  CHECK(c->device.threads == 0);
  CHECK(c->communication_data_type.empty());
}

TEST_CASE("JobConfig: optimizer and scheduler variants", "[config]") {
  SECTION("Adam keeps DeepSpeed's adam_w_mode default, AdamW forces it") {
    auto adam = ParseJobConfig("optimizer: {type: ADAM, params: {adam_w_mode: false}}", "j");
    REQUIRE(adam.ok());
    CHECK(adam->optimizer.type == OptimizerType::kAdam);
    CHECK_FALSE(adam->optimizer.adam_w_mode);
    auto adamw = ParseJobConfig("optimizer: {type: AdamW, params: {adam_w_mode: false}}", "j");
    REQUIRE(adamw.ok());
    CHECK(adamw->optimizer.adam_w_mode);
  }
  SECTION("bias_correction (FusedAdam's and CPU Adam's) is read; AMSGrad is refused as there") {
    auto raw = ParseJobConfig("optimizer: {type: Adam, params: {bias_correction: false}}", "j");
    REQUIRE(raw.ok());
    CHECK_FALSE(raw->optimizer.bias_correction);
    auto plain = ParseJobConfig("optimizer: {type: AdamW, params: {lr: 0.1}}", "j");
    REQUIRE(plain.ok());
    CHECK(plain->optimizer.bias_correction);
    auto ams = ParseJobConfig("optimizer: {type: AdamW, params: {amsgrad: true}}", "j.yaml");
    REQUIRE_FALSE(ams.ok());
    CHECK_THAT(ams.status().message(), Catch::Contains("\"optimizer.params.amsgrad\"") &&
                                           Catch::Contains("DeepSpeed's FusedAdam refuses it too"));
  }
  SECTION("SGD") {
    auto sgd = ParseJobConfig("optimizer: {type: sgd, params: {lr: 0.1, momentum: 0.9}}", "j");
    REQUIRE(sgd.ok());
    CHECK(sgd->optimizer.type == OptimizerType::kSGD);
    CHECK(sgd->optimizer.momentum == Approx(0.9));
  }
  SECTION("WarmupDecayLR with log warmup") {
    auto s = ParseJobConfig(
        "scheduler: {type: WarmupDecayLR, params: {warmup_min_lr: 0, warmup_max_lr: 0.001, "
        "warmup_num_steps: 10, total_num_steps: 100}}",
        "j");
    REQUIRE(s.ok());
    CHECK(s->scheduler.type == SchedulerType::kWarmupDecayLR);
    CHECK(s->scheduler.warmup_type == WarmupType::kLog);
    CHECK(s->scheduler.total_num_steps == 100);
  }
  SECTION("bfloat16 alias, overlap_comm default for stage 3, short stage-3 aliases") {
    auto c = ParseJobConfig(
        "bfloat16: {enabled: true}\n"
        "zero_optimization: {stage: 3, prefetch_bucket_size: 1000, "
        "stage3_max_live_parameters: 2000}\n",
        "j");
    REQUIRE(c.ok());
    CHECK(c->bf16.enabled);
    CHECK(c->zero.overlap_comm);
    CHECK(c->zero.prefetch_bucket_size == 1000);
    CHECK(c->zero.max_live_parameters == 2000);
  }
  SECTION("null values mean the default") {
    auto c = ParseJobConfig("{\"communication_data_type\": null, \"scheduler\": null}", "j");
    REQUIRE(c.ok());
    CHECK(c->communication_data_type.empty());
    CHECK(c->scheduler.type == SchedulerType::kNone);
  }
  SECTION("model from a graph file") {
    auto c = ParseJobConfig("model: {graph: configs/models/gpt2_tiny.pbtxt}", "j");
    REQUIRE(c.ok());
    CHECK(c->model.graph == "configs/models/gpt2_tiny.pbtxt");
    CHECK(c->model.family == ModelFamily::kNone);
  }
  SECTION("llama does not tie embeddings by default") {
    auto c = ParseJobConfig("model: {family: llama, n_head: 12, n_kv_head: 4}", "j");
    REQUIRE(c.ok());
    CHECK(c->model.family == ModelFamily::kLlama);
    CHECK_FALSE(c->model.tie_embeddings);
  }
}

// A typical HuggingFace-era ds_config.json (numbers filled in), pure DeepSpeed keys.
constexpr const char* kRealDsConfig = R"({
  "fp16": {
    "enabled": true,
    "loss_scale": 0,
    "loss_scale_window": 1000,
    "initial_scale_power": 16,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "optimizer": {
    "type": "AdamW",
    "params": {"lr": 3e-5, "betas": [0.8, 0.999], "eps": 1e-8, "weight_decay": 3e-7}
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-5, "warmup_num_steps": 500,
               "total_num_steps": 10000}
  },
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "offload_param": {"device": "cpu", "pin_memory": true},
    "overlap_comm": true,
    "contiguous_gradients": true,
    "sub_group_size": 1e9,
    "reduce_bucket_size": 16777216,
    "stage3_prefetch_bucket_size": 15099494,
    "stage3_param_persistence_threshold": 40960,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": true
  },
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 2000,
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 8,
  "wall_clock_breakdown": false
})";

TEST_CASE("JobConfig: a real-world ds_config.json parses as is", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(kRealDsConfig, "ds_config.json");
  REQUIRE(c.ok());
  CHECK(c->fp16.enabled);
  CHECK(c->fp16.loss_scale == 0.0);
  CHECK(c->optimizer.beta1 == Approx(0.8));
  CHECK(c->optimizer.weight_decay == Approx(3e-7));
  CHECK(c->scheduler.type == SchedulerType::kWarmupDecayLR);
  CHECK(c->scheduler.warmup_max_lr == Approx(3e-5));
  CHECK(c->zero.stage == 3);
  CHECK(c->zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(c->zero.offload_optimizer.pin_memory);
  CHECK(c->zero.offload_param.device == OffloadDevice::kCpu);
  CHECK(c->zero.sub_group_size == 1000000000);
  CHECK(c->zero.prefetch_bucket_size == 15099494);
  CHECK(c->zero.param_persistence_threshold == 40960);
  CHECK(c->zero.max_live_parameters == 1000000000);
  // pin_memory (both blocks) says it changes nothing; the gather-on-save key is not supported.
  REQUIRE(c->warnings.size() == 3);
  CHECK(c->warnings[0].find("zero_optimization.offload_optimizer.pin_memory\" has no effect") !=
        std::string::npos);
  CHECK(c->warnings[1].find("zero_optimization.offload_param.pin_memory") != std::string::npos);
  CHECK(c->warnings[2].find("zero_optimization.stage3_gather_16bit_weights_on_model_save") !=
        std::string::npos);
  CHECK(ResolveBatchSizes(&*c, 2).ok());  // 64 = 8 x 4 x 2
  StatusOr<JobConfig> partial = ParseJobConfig(
      "train_batch_size: 8\nzero_optimization: {stage: 3, offload_optimizer: {device: cpu, "
      "ratio: 0.3, fast_init: true}}\n",
      "job.yaml");
  REQUIRE(partial.ok());
  REQUIRE(partial->warnings.size() == 2);
  CHECK(partial->warnings[0].find("fast_init\" has no effect") != std::string::npos);
  CHECK(partial->warnings[1].find("a partial optimizer offload is not supported") !=
        std::string::npos);
}

TEST_CASE("JobConfig: unsupported DeepSpeed keys warn exactly once each", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(R"(
train_batch_size: 8
tensorboard: {enabled: true, output_path: tb}
wandb: {enabled: true, project: x}
flops_profiler: {enabled: false}
checkpoint: {dir: ckpt, tag_validation: Warn}
)",
                                         "job.yaml");
  REQUIRE(c.ok());
  REQUIRE(c->warnings.size() == 2);
  CHECK(c->warnings[0] ==
        "job.yaml: \"checkpoint.tag_validation\" is a DeepSpeed setting ds-runtime does not "
        "support yet; ignored");
  const std::string all = AllWarnings(*c);
  CHECK(all.find("\"wandb\" is enabled, but it needs a network service") != std::string::npos);
  CHECK_FALSE(c->monitor.flops_profiler.enabled);             // read, not warned
  CHECK(all.find("\"wandb.project\"") == std::string::npos);  // one per block, not per key
  // tensorboard is read (rank 0 writes it), with DeepSpeed's default job name.
  CHECK(c->monitor.tensorboard.enabled);
  CHECK(c->monitor.tensorboard.output_path == "tb");
  CHECK(c->monitor.tensorboard.job_name == "DeepSpeedJobName");
  CHECK_FALSE(c->monitor.csv_monitor.enabled);
}

TEST_CASE("JobConfig: the aio block has DeepSpeed's keys, defaults and old name", "[config]") {
  StatusOr<JobConfig> d = ParseJobConfig("train_batch_size: 8\n", "job.yaml");
  REQUIRE(d.ok());
  CHECK_FALSE(d->aio.present);
  CHECK(d->aio.block_size == 1048576);
  CHECK(d->aio.queue_depth == 8);
  CHECK(d->aio.intra_op_parallelism == 1);
  CHECK_FALSE(d->aio.single_submit);
  CHECK(d->aio.overlap_events);
  StatusOr<JobConfig> c = ParseJobConfig(R"(
train_batch_size: 8
aio: {block_size: 8388608, queue_depth: 32, thread_count: 4, single_submit: true,
      overlap_events: false, use_gds: true}
)",
                                         "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->aio.present);
  CHECK(c->aio.block_size == 8388608);
  CHECK(c->aio.queue_depth == 32);
  CHECK(c->aio.intra_op_parallelism == 4);
  CHECK(c->aio.single_submit);
  CHECK_FALSE(c->aio.overlap_events);
  REQUIRE(c->warnings.size() == 3);
  CHECK(c->warnings[0].find("\"aio.thread_count\" is the old name of intra_op_parallelism") !=
        std::string::npos);
  CHECK(c->warnings[1].find("\"aio.use_gds\"") != std::string::npos);
  CHECK(c->warnings[2].find("this job swaps nothing to NVMe") != std::string::npos);
  StatusOr<JobConfig> swapping = ParseJobConfig(
      "train_batch_size: 8\naio: {queue_depth: 32}\nzero_optimization: {stage: 2, "
      "offload_optimizer: {device: nvme, nvme_path: /nvme}}\n",
      "job.yaml");
  REQUIRE(swapping.ok());
  CHECK(swapping->warnings.empty());
  StatusOr<JobConfig> both = ParseJobConfig(
      "train_batch_size: 8\naio: {thread_count: 4, intra_op_parallelism: 2}\n", "job.yaml");
  REQUIRE(both.ok());
  CHECK(both->aio.intra_op_parallelism == 2);
  for (const char* bad : {"aio: {block_size: 1000}", "aio: {queue_depth: 0}",
                          "aio: {intra_op_parallelism: 0}", "aio: {queue_dept: 8}"}) {
    INFO(bad);
    StatusOr<JobConfig> e = ParseJobConfig(std::string("train_batch_size: 8\n") + bad, "job.yaml");
    REQUIRE_FALSE(e.ok());
    CHECK(e.status().message().find("job.yaml") != std::string::npos);
    CHECK(e.status().message().find("aio.") != std::string::npos);
  }
}

TEST_CASE("JobConfig: the deprecated cpu_offload switches mean what they meant", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(R"(
train_batch_size: 8
zero_optimization: {stage: 3, cpu_offload: true, cpu_offload_param: true,
                    cpu_offload_use_pin_memory: true}
)",
                                         "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->zero.offload_optimizer.device == OffloadDevice::kCpu);
  CHECK(c->zero.offload_param.device == OffloadDevice::kCpu);
  REQUIRE(c->warnings.size() == 3);
  CHECK(c->warnings[0].find("\"zero_optimization.cpu_offload\" is deprecated; read as "
                            "offload_optimizer: {device: cpu}") != std::string::npos);
  CHECK(c->warnings[1].find("offload_param: {device: cpu}") != std::string::npos);
  CHECK(c->warnings[2].find("cpu_offload_use_pin_memory") != std::string::npos);
  StatusOr<JobConfig> off = ParseJobConfig(
      "train_batch_size: 8\nzero_optimization: {stage: 2, cpu_offload: false}\n", "job.yaml");
  REQUIRE(off.ok());
  CHECK(off->zero.offload_optimizer.device == OffloadDevice::kNone);
  StatusOr<JobConfig> both = ParseJobConfig(R"(
train_batch_size: 8
zero_optimization: {stage: 2, cpu_offload: true, offload_optimizer: {device: cpu}}
)",
                                            "job.yaml");
  REQUIRE_FALSE(both.ok());
  CHECK(both.status().message().find("zero_optimization.cpu_offload") != std::string::npos);
  CHECK(both.status().message().find("keep offload_optimizer") != std::string::npos);
}

TEST_CASE("JobConfig: NVMe optimizer offload at stages 1-3; max_in_cpu says it does nothing",
          "[config]") {
  for (int stage : {1, 2, 3}) {
    StatusOr<JobConfig> c =
        ParseJobConfig("train_batch_size: 8\nzero_optimization: {stage: " + std::to_string(stage) +
                           ", offload_optimizer: {device: nvme, nvme_path: "
                           "/local_nvme, pipeline_read: true}}\n",
                       "job.yaml");
    REQUIRE(c.ok());
    CHECK(c->zero.offload_optimizer.device == OffloadDevice::kNvme);
    CHECK(c->zero.offload_optimizer.pipeline_read);
    CHECK(c->warnings.empty());
  }
  StatusOr<JobConfig> c = ParseJobConfig(R"(
train_batch_size: 8
zero_optimization:
  stage: 3
  offload_param: {device: nvme, nvme_path: /local_nvme, max_in_cpu: 1e8}
)",
                                         "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->zero.offload_param.device == OffloadDevice::kNvme);
  REQUIRE(c->warnings.size() == 1);
  CHECK(c->warnings[0].find("zero_optimization.offload_param.max_in_cpu") != std::string::npos);
  CHECK(c->warnings[0].find("has no effect") != std::string::npos);
  StatusOr<JobConfig> gpu = ParseJobConfig(
      "train_batch_size: 8\ndevice: {type: cuda}\nzero_optimization: {stage: 3, offload_param: "
      "{device: cpu}}\n",
      "job.yaml");
  REQUIRE(gpu.ok());
  REQUIRE(gpu->warnings.size() == 1);
  CHECK(gpu->warnings[0].find("keeps the parameter shards on the GPU") != std::string::npos);
}

TEST_CASE("JobConfig: parallel sizes, and DeepSpeed's tensor_parallel.autotp_size", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(
      "train_batch_size: 8\nparallel: {tensor: 2, pipeline: 2, sequence_parallel: true}\n",
      "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->parallel.tensor == 2);
  CHECK(c->parallel.pipeline == 2);
  CHECK(c->parallel.sequence_parallel);
  StatusOr<JobConfig> autotp =
      ParseJobConfig("train_batch_size: 8\ntensor_parallel: {autotp_size: 4}\n", "job.yaml");
  REQUIRE(autotp.ok());
  CHECK(autotp->parallel.tensor == 4);
  CHECK(autotp->warnings.empty());
  StatusOr<JobConfig> both = ParseJobConfig(
      "train_batch_size: 8\nparallel: {tensor: 2}\ntensor_parallel: {autotp_size: 4}\n",
      "job.yaml");
  REQUIRE_FALSE(both.ok());
  CHECK(both.status().message().find("tensor_parallel.autotp_size") != std::string::npos);
  CHECK(both.status().message().find("parallel.tensor is 2") != std::string::npos);
}

TEST_CASE("JobConfig: the pipeline block, ours and DeepSpeed's", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(
      "train_batch_size: 8\nparallel: {pipeline: 4}\npipeline: {schedule: interleaved, "
      "virtual_stages: 2, partition_method: \"type:attention\"}",
      "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->parallel.pipeline == 4);
  CHECK(c->pipeline.schedule == "interleaved");
  CHECK(c->pipeline.virtual_stages == 2);
  CHECK(c->pipeline.partition_method == "type:attention");
  CHECK(c->warnings.empty());
  // DeepSpeed's: stages is the pipeline size ("auto": parallel.pipeline's), partition "best"
  // is the parameters method; the keys that would change nothing warn.
  c = ParseJobConfig(
      "train_batch_size: 8\npipeline: {stages: 2, partition: best, "
      "activation_checkpoint_interval: 1}",
      "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->parallel.pipeline == 2);
  CHECK(c->pipeline.partition_method == "parameters");
  CHECK(c->pipeline.schedule == "1f1b");
  REQUIRE(c->warnings.size() == 1);
  CHECK(c->warnings[0].find("activation_checkpoint_interval") != std::string::npos);
  c = ParseJobConfig("train_batch_size: 8\npipeline: {stages: auto}", "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->parallel.pipeline == 1);
  auto bad = ParseJobConfig("train_batch_size: 8\nparallel: {pipeline: 2}\npipeline: {stages: 4}",
                            "job.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("must equal parallel.pipeline 2") != std::string::npos);
  bad = ParseJobConfig("train_batch_size: 8\npipeline: {virtual_stages: 0}", "job.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("virtual_stages") != std::string::npos);
}

TEST_CASE("JobConfig: LoadJobConfig reads a file and names it", "[config]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/job_config_test.json";
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(kRealDsConfig, f);
  std::fclose(f);
  StatusOr<JobConfig> c = LoadJobConfig(path);
  REQUIRE(c.ok());
  CHECK(c->source == path);
  CHECK(c->zero.stage == 3);

  StatusOr<JobConfig> missing = LoadJobConfig(path + ".missing");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("job_config_test.json.missing") != std::string::npos);
}

TEST_CASE("JobConfig: training.recompute and DeepSpeed's activation_checkpointing", "[config]") {
  auto mode = [](const std::string& yaml) {
    StatusOr<JobConfig> c = ParseJobConfig("train_batch_size: 8\n" + yaml, "job.yaml");
    REQUIRE(c.ok());
    return c->recompute.mode;
  };
  CHECK(mode("") == "none");
  CHECK(mode("training: {recompute: selective}") == "selective");
  CHECK(mode("activation_checkpointing: {}") == "full");
  CHECK(mode("activation_checkpointing: {}\ntraining: {recompute: selective}") == "selective");
  StatusOr<JobConfig> c = ParseJobConfig(
      "train_batch_size: 8\nactivation_checkpointing: {partition_activations: true, "
      "cpu_checkpointing: true, number_checkpoints: 4, contiguous_memory_optimization: true}",
      "job.yaml");
  REQUIRE(c.ok());
  REQUIRE(c->warnings.size() == 3);  // partition_activations is honoured (the trainer says when
                                     // this job has nothing to split)
  CHECK(c->recompute.partition_activations);
  CHECK(c->recompute.cpu_checkpointing);
  CHECK(c->warnings[0].find("number_checkpoints\" changes nothing") != std::string::npos);
  // cpu_checkpointing acts on a device; on the CPU it says why it changes nothing.
  CHECK(c->warnings[2].find("cpu_checkpointing\" changes nothing on the CPU") != std::string::npos);
  StatusOr<JobConfig> bad = ParseJobConfig("training: {recompute: some}", "job.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("training.recompute") != std::string::npos);
}

// DeepSpeed settings whose other values ask for what ds-runtime does not do: one warning each
// naming the key when set to those values, nothing at the values that run; nesterov refused.
TEST_CASE("JobConfig: settings that change nothing here warn, at their other values only",
          "[config]") {
  StatusOr<JobConfig> quiet = ParseJobConfig(R"(
train_batch_size: 8
prescale_gradients: true
gradient_predivide_factor: 1.0
optimizer: {type: AdamW, params: {lr: 0.001, torch_adam: false}}
fp16: {enabled: true, auto_cast: false}
zero_optimization: {stage: 2, contiguous_gradients: true, allgather_partitions: true,
                    round_robin_gradients: false}
)",
                                             "job.yaml");
  REQUIRE(quiet.ok());
  CHECK(quiet->warnings.empty());
  StatusOr<JobConfig> loud = ParseJobConfig(R"(
train_batch_size: 8
prescale_gradients: false
gradient_predivide_factor: 2.0
optimizer: {type: AdamW, params: {lr: 0.001, torch_adam: true}}
scheduler: {type: WarmupLR, params: {last_batch_iteration: 100}}
bf16: {enabled: true, immediate_grad_update: true}
zero_optimization: {stage: 2, contiguous_gradients: false, allgather_partitions: false,
                    round_robin_gradients: true}
)",
                                            "job.yaml");
  REQUIRE(loud.ok());
  const std::string all = AllWarnings(*loud);
  INFO(all);
  for (const char* key :
       {"\"prescale_gradients\": false changes nothing here",
        "\"gradient_predivide_factor\": 2 changes nothing here", "\"optimizer.params.torch_adam\"",
        "\"scheduler.params.last_batch_iteration\": 100", "\"bf16.immediate_grad_update\": true",
        "\"zero_optimization.contiguous_gradients\": false",
        "\"zero_optimization.allgather_partitions\": false",
        "\"zero_optimization.round_robin_gradients\": true"})
    CHECK(all.find(key) != std::string::npos);
  CHECK(loud->warnings.size() == 8);
  StatusOr<JobConfig> sgd = ParseJobConfig(
      "train_batch_size: 8\noptimizer: {type: SGD, params: {lr: 0.1, momentum: 0.9, nesterov: "
      "true}}\n",
      "job.yaml");
  REQUIRE_FALSE(sgd.ok());
  CHECK(sgd.status().message().find("nesterov") != std::string::npos);
}

// HuggingFace's "auto": the batch triad derived from the other two, the ZeRO bucket sizes from
// the model's width as HF's integration does; "auto" where nothing can be derived is refused.
TEST_CASE("JobConfig: \"auto\" resolves where the value can be derived", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(R"({
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": "auto",
  "model": {"family": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 32,
            "max_seq_len": 16},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                        "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto"}
})",
                                         "ds_config.json");
  INFO((c.ok() ? "" : c.status().ToString()));
  REQUIRE(c.ok());
  CHECK(c->zero.reduce_bucket_size == 64 * 64);
  CHECK(c->zero.prefetch_bucket_size == 64 * 64 * 9 / 10);
  CHECK(c->zero.param_persistence_threshold == 640);
  REQUIRE(ResolveBatchSizes(&*c, 2).ok());
  CHECK(c->gradient_accumulation_steps == 1);
  CHECK(c->train_batch_size == 8);
  StatusOr<JobConfig> lr = ParseJobConfig(
      "train_batch_size: 8\noptimizer: {type: AdamW, params: {lr: auto}}\n", "job.yaml");
  REQUIRE_FALSE(lr.ok());
  CHECK(lr.status().message().find("HuggingFace Trainer") != std::string::npos);
  StatusOr<JobConfig> live = ParseJobConfig(
      "train_batch_size: 8\nzero_optimization: {stage: 3, stage3_max_live_parameters: auto}\n",
      "job.yaml");
  REQUIRE(live.ok());  // DeepSpeed's default kept
  CHECK(live->zero.max_live_parameters == 1000000000);
}

// Keys newer DeepSpeed versions read (the audit in runtime/config/README.md) load with one
// warning each instead of failing as unknown; settings that would train differently are refused.
TEST_CASE("JobConfig: newer DeepSpeed keys load with a warning each", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(R"({
  "train_batch_size": 8,
  "vocabulary_size": 50304,
  "gradient_allreduce_op": "mean",
  "compile": {"deepcompile": false},
  "seq_parallel_communication_data_type": "fp32",
  "optimizer": {"type": "AdamW", "legacy_fusion": false,
                "params": {"lr": 0.001, "set_grad_none": true, "foreach": true,
                           "fp32_optimizer_states": true}},
  "fp16": {"enabled": "auto", "fp16_master_weights_and_grads": false},
  "zero_optimization": {"stage": 3, "enable_sanity_checks": false,
                        "stage3_max_live_parameters": "auto",
                        "offload_optimizer": {"device": "cpu", "convert_grad_on_cpu": true,
                                              "super_offload": false}},
  "checkpoint": {"writer": {"type": "FAST"}},
  "tensor_parallel": {"autotp_size": 0, "tp_overlap_comm": false},
  "activation_checkpointing": {"number_checkpoints": false},
  "aio": {"io_backend": "async_io"},
  "comms_logger": {"enabled": true, "prof_ops": ["broadcast"]}
})",
                                         "ds_config.json");
  INFO((c.ok() ? "" : c.status().ToString()));
  REQUIRE(c.ok());
  const std::string all = AllWarnings(*c);
  INFO(all);
  for (const char* key :
       {"\"vocabulary_size\"", "\"gradient_allreduce_op\"", "\"compile\"",
        "\"optimizer.legacy_fusion\"", "\"optimizer.params.set_grad_none\"",
        "\"optimizer.params.foreach\"", "\"fp16.enabled\": \"auto\" is false here",
        "\"fp16.fp16_master_weights_and_grads\"", "\"zero_optimization.enable_sanity_checks\"",
        "\"zero_optimization.offload_optimizer.super_offload\"", "\"checkpoint.writer\"",
        "\"tensor_parallel.tp_overlap_comm\"", "\"aio.io_backend\""})
    CHECK(all.find(key) != std::string::npos);
  CHECK_FALSE(c->fp16.enabled);
  CHECK(c->parallel.tensor == 1);  // autotp_size 0: off
  CHECK(all.find("number_checkpoints") == std::string::npos);
  CHECK(all.find("fp32_optimizer_states") == std::string::npos);  // what runs
  for (const char* refused : {"optimizer: {type: AdamW, params: {lr: 0.001, maximize: true}}",
                              "optimizer: {type: SGD, params: {lr: 0.1, dampening: 0.5}}",
                              "optimizer: {type: Muon, params: {lr: 0.1}}"}) {
    INFO(refused);
    StatusOr<JobConfig> r =
        ParseJobConfig(std::string("train_batch_size: 8\n") + refused, "job.yaml");
    CHECK_FALSE(r.ok());
  }
  StatusOr<JobConfig> muon =
      ParseJobConfig("train_batch_size: 8\noptimizer: {type: Muon, params: {lr: 0.1}}\n", "j.yaml");
  CHECK(muon.status().message().find("DeepSpeed optimizer \"Muon\" is not supported yet") !=
        std::string::npos);
}

// DeepSpeed-Chat's training config (its get_train_ds_config, written out for stage 3 with CPU
// offload, fp16 and the hybrid engine) loads: what does not run here warns, once each.
TEST_CASE("JobConfig: DeepSpeed-Chat's training config loads", "[config]") {
  StatusOr<JobConfig> c = ParseJobConfig(R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 4,
  "steps_per_print": 10,
  "zero_optimization": {"stage": 3, "overlap_comm": true,
                        "offload_param": {"device": "cpu"},
                        "offload_optimizer": {"device": "cpu"},
                        "stage3_param_persistence_threshold": 1e4,
                        "stage3_max_live_parameters": 3e7,
                        "stage3_prefetch_bucket_size": 3e7,
                        "memory_efficient_linear": false},
  "fp16": {"enabled": true, "loss_scale_window": 100},
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "wall_clock_breakdown": false,
  "hybrid_engine": {"enabled": false, "max_out_tokens": 512, "inference_tp_size": 1,
                    "release_inference_cache": false, "pin_parameters": true,
                    "tp_gather_partition_size": 8},
  "tensorboard": {"enabled": false, "output_path": "step1_tensorboard/ds_tensorboard_logs/",
                  "job_name": "step1_model_tensorboard"}
})",
                                         "ds_config.json");
  INFO((c.ok() ? "" : c.status().ToString()));
  REQUIRE(c.ok());
  CHECK(c->zero.stage == 3);
  CHECK(c->zero.offload_param.device == OffloadDevice::kCpu);
  CHECK(c->zero.max_live_parameters == 30000000);
  CHECK(c->fp16.loss_scale_window == 100);
  CHECK(c->steps_per_print == 10);
  CHECK(c->monitor.tensorboard.job_name == "step1_model_tensorboard");
  const std::string all = AllWarnings(*c);
  INFO(all);
  CHECK(c->warnings.size() == 3);
  CHECK(all.find("\"prescale_gradients\": false changes nothing here") != std::string::npos);
  CHECK(all.find("\"zero_optimization.memory_efficient_linear\"") != std::string::npos);
  CHECK(all.find("\"hybrid_engine.enabled\": false changes nothing here") != std::string::npos);
}

}  // namespace
}  // namespace ds::config
