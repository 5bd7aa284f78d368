// Every kind of config error names the file, the full key path and what is wrong.
#include <string>

#include <catch2/catch.hpp>

#include "runtime/config/job_config.h"
#include "runtime/config/key_suggest.h"

namespace ds::config {
namespace {

// The error message of parsing `text` as job.yaml; "" when it parses.
std::string ErrorOf(const std::string& text) {
  StatusOr<JobConfig> c = ParseJobConfig(text, "job.yaml");
  if (c.ok()) return "";
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  return c.status().message();
}

bool Contains(const std::string& haystack, const std::string& needle) {
  const bool found = haystack.find(needle) != std::string::npos;
  if (!found) UNSCOPED_INFO("\"" << haystack << "\" lacks \"" << needle << "\"");
  return found;
}

TEST_CASE("Config errors: unknown keys suggest the closest known key", "[config]") {
  CHECK(ErrorOf("zero_optimization:\n  stagee: 2\n") ==
        "job.yaml: unknown key \"zero_optimization.stagee\" (did you mean \"stage\"?)");
  CHECK(ErrorOf("train_batch_sze: 8\n") ==
        "job.yaml: unknown key \"train_batch_sze\" (did you mean \"train_batch_size\"?)");
  CHECK(ErrorOf("optimizer: {type: Adam, params: {lrr: 0.1}}") ==
        "job.yaml: unknown key \"optimizer.params.lrr\" (did you mean \"lr\"?)");
  CHECK(ErrorOf("model: {family: gpt2, n_layers: 2}") ==
        "job.yaml: unknown key \"model.n_layers\" (did you mean \"n_layer\"?)");
  // The obvious key, not the nearest spelling: a longer key it begins, a synonym from other
  // trainers; and no suggestion for a different word.
  CHECK(ErrorOf("train_micro_batch_size: 4") ==
        "job.yaml: unknown key \"train_micro_batch_size\" (did you mean "
        "\"train_micro_batch_size_per_gpu\"?)");
  CHECK(ErrorOf("optimizer: {type: AdamW, params: {learning_rate: 0.1}}") ==
        "job.yaml: unknown key \"optimizer.params.learning_rate\" (did you mean \"lr\"?)");
  CHECK(ErrorOf("zero_optimization: {stage: 3, prefetch_bucket: 5}") ==
        "job.yaml: unknown key \"zero_optimization.prefetch_bucket\" (did you mean "
        "\"prefetch_bucket_size\"?)");
  CHECK(ErrorOf("optimizer: {type: AdamW, params: {frobnicate: 1}}") ==
        "job.yaml: unknown key \"optimizer.params.frobnicate\"");
  // Transposed words: the word sets match where the spelling is far (edit distance 8 here).
  CHECK(ErrorOf("zero_optimization: {stage: 2, comm_overlap: true}") ==
        "job.yaml: unknown key \"zero_optimization.comm_overlap\" (did you mean "
        "\"overlap_comm\"?)");
  CHECK(ErrorOf("zero_optimization: {stage: 2, size_reduce_bucket: 5}") ==
        "job.yaml: unknown key \"zero_optimization.size_reduce_bucket\" (did you mean "
        "\"reduce_bucket_size\"?)");
  CHECK(ErrorOf("zero_optimization: {stage: 2, comm_ovrlap: true}") ==
        "job.yaml: unknown key \"zero_optimization.comm_ovrlap\" (did you mean "
        "\"overlap_comm\"?)");
  // SGD has no betas: the key is unknown for that type.
  CHECK(Contains(ErrorOf("optimizer: {type: SGD, params: {betas: [0.9, 0.99]}}"),
                 "unknown key \"optimizer.params.betas\""));
  // Nothing close: no suggestion.
  CHECK(ErrorOf("device: {xyz: 1}") == "job.yaml: unknown key \"device.xyz\"");
}

TEST_CASE("Config errors: wrong types name file and key", "[config]") {
  CHECK(ErrorOf("optimizer:\n  type: Adam\n  params:\n    lr: abc\n") ==
        "job.yaml: key \"optimizer.params.lr\" (line 4): expected a number, got \"abc\"");
  CHECK(Contains(ErrorOf("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"0.1\"}}}"),
                 "key \"optimizer.params.lr\" (line 1): expected a number, got string \"0.1\""));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: two}"),
                 "key \"zero_optimization.stage\" (line 1): expected an integer"));
  CHECK(Contains(ErrorOf("train_batch_size: 8.5"), "key \"train_batch_size\""));
  CHECK(Contains(ErrorOf("fp16: {enabled: 3}"), "key \"fp16.enabled\" (line 1): expected true"));
  CHECK(Contains(ErrorOf("optimizer: {type: Adam, params: {betas: [0.9]}}"),
                 "key \"optimizer.params.betas\" (line 1): expected a list of two numbers"));
  CHECK(Contains(ErrorOf("zero_optimization: 2"),
                 "key \"zero_optimization\" (line 1): expected a map"));
  CHECK(Contains(ErrorOf("{\"gradient_clipping\": \"auto\"}"), "HuggingFace Trainer"));
}

TEST_CASE("Config errors: out-of-range values", "[config]") {
  CHECK(ErrorOf("optimizer: {type: Adam, params: {lr: -0.1}}") ==
        "job.yaml: key \"optimizer.params.lr\" (line 1): must be >= 0, got -0.1");
  CHECK(Contains(ErrorOf("optimizer: {type: Adam, params: {betas: [0.9, 1.0]}}"),
                 "key \"optimizer.params.betas\" (line 1): both betas must be in [0, 1)"));
  CHECK(Contains(ErrorOf("optimizer: {type: Adam, params: {betas: [-0.1, 0.9]}}"),
                 "optimizer.params.betas"));
  CHECK(Contains(ErrorOf("fp16: {enabled: true}\nbf16: {enabled: true}\n"),
                 "job.yaml: key \"bf16\" (line 2): fp16 and bf16 cannot both be enabled"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 4}"),
                 "key \"zero_optimization.stage\" (line 1): must be 0, 1, 2 or 3, got 4"));
  CHECK(Contains(ErrorOf("device: {cpu_gemm: mkl}"),
                 "key \"device.cpu_gemm\" (line 1): must be auto, onednn or openblas, got mkl"));
  CHECK(Contains(ErrorOf("device: {cpu_bf16_matmul: yes}"),
                 "key \"device.cpu_bf16_matmul\" (line 1): must be auto, bf16 or fp32"));
  CHECK(ErrorOf("device: {cpu_gemm: openblas, cpu_bf16_matmul: bf16}") == "");
  CHECK(Contains(ErrorOf("train_batch_size: 0"), "key \"train_batch_size\""));
  CHECK(Contains(ErrorOf("gradient_clipping: -1"), "key \"gradient_clipping\""));
  CHECK(Contains(ErrorOf("fp16: {hysteresis: 0}"), "key \"fp16.hysteresis\""));
  CHECK(Contains(ErrorOf("model: {family: gpt2, n_embd: 100, n_head: 3}"), "model.n_head"));
  CHECK(Contains(ErrorOf("model: {family: gpt2, dropout: 1.5}"), "model.dropout"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 1, offload_optimizer: {device: nvme}}"),
                 "nvme needs nvme_path"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 0, offload_optimizer: "
                         "{device: nvme, nvme_path: /nvme}}"),
                 "needs stage 1, 2 or 3"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 0, offload_optimizer: {device: cpu}}"),
                 "needs stage 1, 2 or 3"));
  // device auto: parallel: auto's choice between none and nvme, on the nvme_path given.
  CHECK(Contains(ErrorOf("zero_optimization: {offload_optimizer: {device: auto}}"),
                 "auto (parallel: auto chooses none or nvme) needs nvme_path"));
  CHECK(Contains(ErrorOf("zero_optimization: {offload_optimizer: {device: auto, nvme_path: /n}}"),
                 "zero_optimization.offload_optimizer.device auto is parallel: auto's to choose"));
  CHECK(Contains(ErrorOf("parallel: auto\ntrain_batch_size: 8\nzero_optimization: "
                         "{offload_param: {device: auto, nvme_path: /n}}"),
                 "offload_param.device auto needs offload_optimizer.device auto too"));
  CHECK(ErrorOf("parallel: auto\ntrain_batch_size: 8\nzero_optimization: {offload_optimizer: "
                "{device: auto, nvme_path: /n}, offload_param: {device: auto, nvme_path: /n}}") ==
        "");
  CHECK(Contains(ErrorOf("scheduler: {type: WarmupLR, params: {warmup_type: cubic}}"),
                 "key \"scheduler.params.warmup_type\""));
  CHECK(Contains(ErrorOf("communication_data_type: int8"), "communication_data_type"));
  CHECK(Contains(ErrorOf("data: {format: parquet}"), "key \"data.format\""));
  CHECK(Contains(ErrorOf("device: {type: tpu}"), "key \"device.type\""));
  CHECK(Contains(ErrorOf("checkpoint: {load: latest}"), "\"latest\" needs checkpoint.dir"));
}

TEST_CASE("Config errors: required and conflicting keys", "[config]") {
  CHECK(Contains(ErrorOf("optimizer: {params: {lr: 0.1}}"), "key \"optimizer.type\": is required"));
  CHECK(Contains(ErrorOf("optimizer: {type: Lamb}"),
                 "DeepSpeed optimizer \"Lamb\" is not supported yet"));
  CHECK(Contains(ErrorOf("optimizer: {type: Adamax}"), "unknown optimizer \"Adamax\""));
  CHECK(Contains(ErrorOf("optimizer: {type: Adam, params: {max_grad_norm: 1.0}}"),
                 "use the top-level gradient_clipping"));
  CHECK(Contains(ErrorOf("scheduler: {type: OneCycle}"),
                 "DeepSpeed scheduler \"OneCycle\" is not supported yet"));
  CHECK(Contains(ErrorOf("scheduler: {type: WarmupCosineLR, params: {warmup_num_steps: 5}}"),
                 "key \"scheduler.params.total_num_steps\": is required by WarmupCosineLR"));
  CHECK(Contains(ErrorOf("model: {graph: g.pbtxt, n_layer: 2}"),
                 "key \"model.n_layer\" (line 1): cannot be combined with model.graph"));
  CHECK(Contains(ErrorOf("model: {n_layer: 2}"), "key \"model.family\": is required"));
  CHECK(
      Contains(ErrorOf("bf16: {enabled: true}\nbfloat16: {enabled: true}\n"), "alias of \"bf16\""));
  CHECK(Contains(ErrorOf("zero_optimization: {stage3_max_live_parameters: 1, "
                         "max_live_parameters: 2}"),
                 "give only one"));
  CHECK(Contains(ErrorOf("model: {family: gpt2, max_seq_len: 64}\ndata: {seq_len: 128}\n"),
                 "data.seq_len 128 exceeds model.max_seq_len 64"));
  CHECK(Contains(ErrorOf("monitor: {eval_interval: 10}"), "needs data.validation"));
  // ZeRO++ is stage 3's; MiCS is refused with its reason.
  CHECK(ErrorOf("zero_optimization: {stage: 3, zero_hpz_partition_size: 2, "
                "zero_quantized_weights: true, zero_quantized_gradients: true}") == "");
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 2, zero_quantized_gradients: true}"),
                 "key \"zero_optimization.zero_quantized_gradients\""));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 2, zero_quantized_gradients: true}"),
                 "is ZeRO++, which needs stage 3"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 3, zero_hpz_partition_size: 0}"),
                 "must be >= 1"));
  CHECK(Contains(ErrorOf("zero_optimization: {stage: 3, mics_shard_size: 8}"),
                 "MiCS is not supported"));
  CHECK(ErrorOf("zero_optimization: {stage: 3, mics_shard_size: -1}") == "");
  // Megatron datasets: Megatron's --data-path forms, checked as the config is read.
  CHECK(ErrorOf("data: {path: [0.3, a, 0.7, b], split: \"969,30,1\"}") == "");
  CHECK(ErrorOf("data: {path: a_text_document}") == "");
  CHECK(Contains(ErrorOf("data: {path: []}"), "data.path"));
  CHECK(Contains(ErrorOf("data: {path: [0.3, a, -0.7, b]}"), "data.path"));
  CHECK(Contains(ErrorOf("data: {path: a, split: \"90,x\"}"), "data.split"));
  CHECK(Contains(ErrorOf("data: {path: a, train: t.tok}"),
                 "key \"data.train\" (line 1): cannot be combined with data.path"));
  CHECK(Contains(ErrorOf("data: {train: t.tok, split: \"90,10\"}"),
                 "key \"data.split\" (line 1): needs data.path"));
  CHECK(Contains(ErrorOf("data: {path: a, train_samples: -1}"), "data.train_samples"));
  CHECK(ErrorOf("data: {path: a}\nmonitor: {eval_interval: 10}") == "");
  // Packed documents' masks: the EOD id is required, and the per-token inputs run on one
  // pipeline stage without Ulysses.
  CHECK(Contains(ErrorOf("data: {reset_attention_mask: true}"), "data.eod_token"));
  CHECK(Contains(ErrorOf("data: {reset_position_ids: true, eod_token: 0}\n"
                         "parallel: {pipeline: 2}"),
                 "do not run with parallel.ulysses or parallel.pipeline"));
  CHECK(Contains(ErrorOf("data: {sft: {prompt: p, answer: a}, format: ds}"),
                 "cannot be combined with data.sft"));
  // Mixture of experts and the all-to-all layouts.
  const std::string gpt = "model: {family: gpt2, moe: {num_experts: 4, ";
  CHECK(Contains(ErrorOf(gpt + "top_k: 3}}"), "key \"model.moe.top_k\" (line 1): must be 1 or 2"));
  CHECK(Contains(ErrorOf(gpt + "noisy_gate_policy: Jitter}}"), "Jitter is not supported"));
  CHECK(Contains(ErrorOf(gpt + "capacity_factor: 0}}"), "model.moe.capacity_factor"));
  CHECK(Contains(ErrorOf(gpt + "num_expert: 4}}"), "num_experts"));  // did you mean
  CHECK(Contains(ErrorOf("parallel: {ulysses: 2}\nsequence_parallel_size: 4\n"),
                 "must equal parallel.ulysses 2"));
  CHECK(
      Contains(ErrorOf("parallel: {expert: 0}"), "key \"parallel.expert\" (line 1): must be >= 1"));
  // LoRA: PEFT's keys or DeepSpeed-Chat's, never mixed; what PEFT offers that is not built.
  const std::string lora = "model: {family: llama, lora: {";
  CHECK(ErrorOf(lora + "r: 8, target_modules: [q_proj, v_proj]}}") == "");
  CHECK(ErrorOf(lora + "lora_dim: 8, lora_module_name: layers., only_optimize_lora: true}}") == "");
  CHECK(
      Contains(ErrorOf(lora + "lora_dim: 8, r: 8}}"), "key \"model.lora.r\" (line 1): is PEFT's"));
  CHECK(Contains(ErrorOf(lora + "r: 8, only_optimize_lora: true}}"), "is DeepSpeed-Chat's name"));
  CHECK(Contains(ErrorOf(lora + "r: 0}}"), "key \"model.lora.r\" (line 1): must be >= 1"));
  CHECK(Contains(ErrorOf(lora + "bias: all}}"), "must be none"));
  CHECK(Contains(ErrorOf(lora + "lora_dim: 4, adapter: a}}"), "needs the base weights frozen"));
  CHECK(Contains(ErrorOf(lora + "rr: 4}}"), "did you mean \"r\"?"));
  CHECK(Contains(ErrorOf("model: {graph: g.pbtxt, lora: {r: 4}}"), "not a graph file"));
}

TEST_CASE("Config errors: syntax, empty files and duplicate keys", "[config]") {
  CHECK(Contains(ErrorOf("a: [1, 2\n"), "job.yaml:"));
  CHECK(Contains(ErrorOf("{\"train_batch_size\": 8,,}"), "(line 1) is not a plain name"));
  CHECK(Contains(ErrorOf("{\"train_batch_size\": 8\n\"seed\": 1}"), "job.yaml:2:"));
  CHECK(ErrorOf("") == "job.yaml: the config is empty");
  CHECK(ErrorOf("# nothing\n") == "job.yaml: the config is empty");
  CHECK(Contains(ErrorOf("- a\n- b\n"), "expected a map of keys at the top level"));
  CHECK(ErrorOf("seed: 1\nseed: 2\n") == "job.yaml: duplicate key \"seed\" (line 2)");
}

TEST_CASE("Config errors: edit distance and suggestions", "[config]") {
  using config::ClosestKey;
  using config::EditDistance;
  CHECK(EditDistance("stage", "stage") == 0);
  CHECK(EditDistance("stagee", "stage") == 1);
  CHECK(EditDistance("kitten", "sitting") == 3);
  CHECK(EditDistance("", "abc") == 3);
  CHECK(EditDistance("FP16", "fp16") == 0);
  CHECK(ClosestKey("lrr", {"lr", "betas", "eps"}) == "lr");
  CHECK(ClosestKey("comm_overlap", {"overlap_comm", "contiguous_gradients"}) == "overlap_comm");
  CHECK(ClosestKey("comm_overlap_x", {"overlap_comm"}).empty());  // a word more: no match
  CHECK(ClosestKey("zzz", {"lr", "eps"}).empty());
  CHECK(ClosestKey("x", {}).empty());
}

TEST_CASE("fault_tolerance: the hang deadline's forms, and bad ones named", "[config]") {
  auto parse = [](const std::string& text) { return ParseJobConfig(text, "job.yaml"); };
  auto c = parse("fault_tolerance: {hang_timeout: auto, hang_timeout_min: 3}\n");
  REQUIRE(c.ok());
  CHECK(c->fault_tolerance.hang_detection);
  CHECK(c->fault_tolerance.hang_timeout_s == 0);
  CHECK(c->fault_tolerance.hang_timeout_min_s == 3);
  c = parse("fault_tolerance: {hang_timeout: 45}\n");
  REQUIRE(c.ok());
  CHECK(c->fault_tolerance.hang_timeout_s == 45);
  c = parse("fault_tolerance: {hang_timeout: off}\n");
  REQUIRE(c.ok());
  CHECK(!c->fault_tolerance.hang_detection);
  c = parse("fault_tolerance: {hang_timeout: false}\n");
  REQUIRE(c.ok());
  CHECK(!c->fault_tolerance.hang_detection);
  CHECK(JobConfig().fault_tolerance.hang_detection);  // on by default
  CHECK(ErrorOf("fault_tolerance: {hang_timeout: soon}\n") ==
        "job.yaml: key \"fault_tolerance.hang_timeout\" (line 1): must be auto, off or a number "
        "of seconds > 0, got soon");
  CHECK(Contains(ErrorOf("fault_tolerance: {hang_timeout: -5}\n"), "fault_tolerance.hang_timeout"));
  CHECK(Contains(ErrorOf("fault_tolerance: {hang_timeout_min: 20, hang_timeout_max: 10}\n"),
                 "fault_tolerance.hang_timeout_max\" (line 1): must be >= hang_timeout_min"));
  CHECK(Contains(ErrorOf("fault_tolerance: {hang_timout: 5}\n"),
                 "unknown key \"fault_tolerance.hang_timout\" (did you mean \"hang_timeout\"?)"));
}

TEST_CASE("fault_tolerance.in_memory_interval: longer than the run, negative, or with NVMe states",
          "[config]") {
  auto c = ParseJobConfig("fault_tolerance: {in_memory_interval: 5}\ntraining: {train_iters: 20}\n",
                          "job.yaml");
  REQUIRE(c.ok());
  CHECK(c->fault_tolerance.in_memory_interval == 5);
  CHECK(JobConfig().fault_tolerance.in_memory_interval == 0);  // off by default
  CHECK(Contains(
      ErrorOf("fault_tolerance: {in_memory_interval: 50}\ntraining: {train_iters: 20}\n"),
      "fault_tolerance.in_memory_interval 50 is longer than the run (training.train_iters 20): "
      "no copy would be made"));
  CHECK(Contains(ErrorOf("fault_tolerance: {in_memory_interval: -1}\n"),
                 "fault_tolerance.in_memory_interval\" (line 1): must be >= 0"));
  CHECK(Contains(ErrorOf("fault_tolerance: {in_memory_interval: 1}\nzero_optimization: {stage: 2, "
                         "offload_optimizer: {device: nvme, nvme_path: /tmp}}\n"),
                 "model states swapped to NVMe"));
}

// DeepSpeed's elasticity rule (v0.1) on the worked examples of its code: max 2000 with micros
// [2, 4, 6] gives 1680, valid at 32 sizes, 30 -> micro 4 x gas 14; sizes 16-64 leave 16 and 32
// out; max 1024, micros [1, 2, 4], sizes 8-64 give 840.
TEST_CASE("elasticity: the batch every size in range runs, and bad blocks named", "[config]") {
  ElasticityConfig e;
  e.enabled = true;
  auto b = ComputeElasticBatch(e);
  REQUIRE(b.ok());
  CHECK(b->train_batch_size == 1680);
  CHECK(b->valid_sizes.size() == 32);
  CHECK(b->valid_sizes.back() == 840);
  e.min_gpus = 16, e.max_gpus = 64;
  b = ComputeElasticBatch(e);
  REQUIRE(b.ok());
  CHECK(b->train_batch_size == 1680);
  CHECK(b->valid_sizes == std::vector<int64_t>{20, 21, 24, 28, 30, 35, 40, 42, 56, 60});
  ElasticityConfig f;
  f.enabled = true, f.max_train_batch_size = 1024, f.micro_batch_sizes = {1, 2, 4};
  f.min_gpus = 8, f.max_gpus = 64;
  b = ComputeElasticBatch(f);
  REQUIRE(b.ok());
  CHECK(b->train_batch_size == 840);

  auto c = ParseJobConfig(
      "elasticity: {enabled: true, max_train_batch_size: 2000, "
      "micro_batch_sizes: [2, 4, 6]}\n",
      "job.yaml");
  REQUIRE(c.ok());
  REQUIRE(ResolveBatchSizes(&*c, 30).ok());
  CHECK(c->train_batch_size == 1680);
  CHECK(c->train_micro_batch_size_per_gpu == 4);
  CHECK(c->gradient_accumulation_steps == 14);
  CHECK(Contains(ResolveBatchSizes(&*c, 16).ToString(),
                 "elasticity: train_batch_size 1680 does not run at data-parallel size 16"));
  // No batch size satisfies the block: refused when the config is read.
  CHECK(Contains(ErrorOf("elasticity: {enabled: true, max_train_batch_size: 8, "
                         "micro_batch_sizes: [16], min_gpus: 2, max_gpus: 4}\n"),
                 "elasticity: no train_batch_size up to max_train_batch_size 8"));
  CHECK(Contains(ErrorOf("train_batch_size: 64\nelasticity: {enabled: true}\n"),
                 "elasticity sets the batch sizes, and train_batch_size is given too"));
  CHECK(ParseJobConfig("train_batch_size: 64\nelasticity: {enabled: true, "
                       "ignore_non_elastic_batch_info: true}\n",
                       "job.yaml")
            .ok());
  CHECK(Contains(ErrorOf("elasticity: {enabled: true, min_gpus: 8, max_gpus: 4}\n"),
                 "elasticity.max_gpus\" (line 1): must be >= min_gpus"));
}

}  // namespace
}  // namespace ds::config

namespace ds::config {
namespace {

// parallel: auto picks every model-parallel size; a size given beside it contradicts it.
TEST_CASE("Config errors: a parallel size beside parallel: auto", "[config]") {
  CHECK(Contains(ErrorOf("train_batch_size: 8\nparallel: auto\nsequence_parallel_size: 2\n"),
                 "key \"sequence_parallel_size\" (line 3): contradicts parallel: auto"));
  CHECK(Contains(ErrorOf("train_batch_size: 8\nparallel: auto\npipeline: {stages: 2}\n"),
                 "contradicts parallel: auto"));
  CHECK(ErrorOf("train_batch_size: 8\nparallel: auto\nsequence_parallel_size: 1\n").empty());
}

}  // namespace
}  // namespace ds::config
