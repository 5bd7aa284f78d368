#include "runtime/config/job_config.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>

#include <yaml-cpp/yaml.h>

#include "runtime/base/logging.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/job_config_internal.h"

namespace ds::config {
namespace {

using config::internal::MapReader;
using config::internal::ParseContext;

// Top-level DeepSpeed keys we accept but do not act on yet (one warning each when present).
constexpr const char* kUnsupportedTopLevel[] = {"vocabulary_size",
                                                "compile",
                                                "torch_autocast",
                                                "gradient_allreduce_op",
                                                "managed_gradient_accumulation",
                                                "log_level",
                                                "expert_parallel",
                                                "datastates_ckpt",
                                                "trackio",
                                                "seq_parallel_communication_data_type",
                                                "disable_python_gc",
                                                "amp",
                                                "sparse_attention",
                                                "compression_training",
                                                "data_efficiency",
                                                "curriculum_learning",
                                                "autotuning",
                                                "memory_breakdown",
                                                "dump_state",
                                                "zero_allow_untested_optimizer",
                                                "zero_force_ds_cpu_optimizer",
                                                "fp16_master_weights_and_grads",
                                                "sparse_gradients",
                                                "disable_allgather",
                                                "data_types",
                                                "seq_parallel_comm_data_type",
                                                "dataloader_drop_last",
                                                "use_data_before_expert_parallelism",
                                                "graph_harvesting",
                                                "eigenvalue",
                                                "progressive_layer_drop",
                                                "weight_quantization",
                                                "quantize_training",
                                                "nebula",
                                                "timers"};

void ParseTopLevelScalars(MapReader& r, JobConfig* c) {
  // The batch triad; "auto" (HuggingFace's placeholder) is derived by ResolveBatchSizes.
  for (auto [key, out] :
       {std::pair{"train_batch_size", &c->train_batch_size},
        std::pair{"train_micro_batch_size_per_gpu", &c->train_micro_batch_size_per_gpu},
        std::pair{"gradient_accumulation_steps", &c->gradient_accumulation_steps}}) {
    if (r.IsAuto(key)) {
      c->auto_keys.push_back(key);
      continue;
    }
    r.Get(key, out);
    r.Require(*out >= 1 || !r.Has(key), key, "must be >= 1");
  }
  r.Get("steps_per_print", &c->steps_per_print);
  r.Require(c->steps_per_print >= 1 || !r.Has("steps_per_print"), "steps_per_print",
            "must be >= 1");
  r.Get("gradient_clipping", &c->gradient_clipping);
  r.Require(c->gradient_clipping >= 0, "gradient_clipping", "must be >= 0 (0 disables)");
  r.Get("wall_clock_breakdown", &c->wall_clock_breakdown);
  // The backward's loss gradient is 1 / (gas x dp): gradients are divided before any reduction.
  r.Inert("prescale_gradients", true,
          "gradients are always divided by gas x dp before they are reduced (the backward's "
          "loss gradient), which is what prescale_gradients: true does");
  r.Inert("gradient_predivide_factor", 1.0,
          "gradients are divided by gas x dp before they are reduced, in one step");
  std::string comm;
  if (r.Get("communication_data_type", &comm)) {
    const std::string t = config::internal::Lower(comm);
    if (t == "fp32" || t == "fp16" || t == "bf16") {
      c->communication_data_type = t;
    } else if (t == "bfp16") {  // DeepSpeed's spelling
      c->communication_data_type = "bf16";
    } else {
      r.Fail("communication_data_type", "must be fp32, fp16 or bf16, got \"" + comm + "\"");
    }
  }
  r.Get("seed", &c->seed);
}

// ZeRO's bucket sizes given as "auto": from the model's width h as HuggingFace's integration
// derives them (reduce h^2, stage-3 prefetch 0.9 h^2, persistence threshold 10 h).
void ResolveAutoBuckets(MapReader& r, JobConfig* c) {
  const int64_t h = c->model.n_embd;
  for (const std::string& key : c->zero.auto_keys) {
    int64_t* out = key == "reduce_bucket_size"            ? &c->zero.reduce_bucket_size
                   : key == "prefetch_bucket_size"        ? &c->zero.prefetch_bucket_size
                   : key == "param_persistence_threshold" ? &c->zero.param_persistence_threshold
                                                          : nullptr;
    if (!out) {  // max_live_parameters, max_reuse_distance: DeepSpeed keeps its default
      DS_LOG_INFO("config", "{}: zero_optimization.{} \"auto\" keeps DeepSpeed's default",
                  c->source, key);
      continue;
    }
    if (c->model.family == ModelFamily::kNone) {
      r.Fail("zero_optimization",
             "zero_optimization " + key +
                 " \"auto\" is derived from the model's width (model.n_embd of a generated "
                 "model); this model is a graph file or a Hugging Face folder: give a number");
      continue;
    }
    *out = key == "reduce_bucket_size"     ? h * h
           : key == "prefetch_bucket_size" ? h * h * 9 / 10
                                           : 10 * h;
    DS_LOG_INFO("config", "{}: zero_optimization.{} \"auto\" is {} (from the model width {})",
                c->source, key, *out, h);
  }
}

// Checks that span sections; run after every section is read.
// fault_tolerance.in_memory_interval and elasticity against the rest of the job.
void CheckRecovery(MapReader& r, const JobConfig& job, bool swaps) {
  const JobConfig* c = &job;
  if (c->elasticity.enabled) {
    auto elastic = ComputeElasticBatch(c->elasticity);
    if (!elastic.ok()) r.Fail("elasticity", elastic.status().message());
    const char* given = c->train_batch_size > 0                 ? "train_batch_size"
                        : c->train_micro_batch_size_per_gpu > 0 ? "train_micro_batch_size_per_gpu"
                        : c->gradient_accumulation_steps > 0    ? "gradient_accumulation_steps"
                                                                : nullptr;
    if (given && !c->elasticity.ignore_non_elastic_batch_info)
      r.Fail("elasticity", std::string("elasticity sets the batch sizes, and ") + given +
                               " is given too (remove it, or set "
                               "elasticity.ignore_non_elastic_batch_info: true to ignore it)");
  }
  const int64_t copies = c->fault_tolerance.in_memory_interval;
  if (copies > 0 && c->train_iters > 0 && copies > c->train_iters)
    r.Fail("fault_tolerance", "fault_tolerance.in_memory_interval " + std::to_string(copies) +
                                  " is longer than the run (training.train_iters " +
                                  std::to_string(c->train_iters) + "): no copy would be made");
  if (copies > 0 && swaps)
    r.Fail("fault_tolerance",
           "fault_tolerance.in_memory_interval with model states swapped to NVMe: their bytes "
           "are not in memory to copy; use checkpoint.save_interval");
}

void CrossCheck(MapReader& r, JobConfig* c) {
  ResolveAutoBuckets(r, c);
  const bool generated = c->model.family != ModelFamily::kNone;
  if (generated && c->data.seq_len > c->model.max_seq_len) {
    r.Fail("data", "data.seq_len " + std::to_string(c->data.seq_len) +
                       " exceeds model.max_seq_len " + std::to_string(c->model.max_seq_len));
  }
  if ((c->data.reset_position_ids || c->data.reset_attention_mask) &&
      (c->parallel.ulysses > 1 || c->parallel.pipeline > 1))
    r.Fail("data",
           "data.reset_position_ids / reset_attention_mask (per-token inputs of the graph) do not "
           "run with parallel.ulysses or parallel.pipeline > 1");
  if (c->monitor.eval_interval > 0 && !c->data.has_validation()) {
    r.Fail("monitor",
           "monitor.eval_interval needs data.validation (or data.path, or data.sft's "
           "validation_prompt and validation_answer)");
  }
  if (c->recompute.cpu_checkpointing && c->device.type != DeviceType::kCuda)
    r.Warn(
        "\"activation_checkpointing.cpu_checkpointing\" changes nothing on the CPU: the kept "
        "block inputs already live in host memory");
  else if (c->recompute.cpu_checkpointing && c->recompute.mode != "full")
    r.Warn(
        "\"activation_checkpointing.cpu_checkpointing\" changes nothing with "
        "training.recompute " +
        c->recompute.mode +
        ": it moves the block inputs full "
        "recompute keeps");
  const OffloadDevice oo = c->zero.offload_optimizer.device, op = c->zero.offload_param.device;
  for (const auto& [key, d] : {std::pair{"offload_optimizer", oo}, std::pair{"offload_param", op}})
    if (d == OffloadDevice::kAuto && !c->parallel.auto_layout)
      r.Fail("zero_optimization", std::string("zero_optimization.") + key +
                                      ".device auto is parallel: auto's to choose (none or nvme); "
                                      "without parallel: auto say which");
  if (op == OffloadDevice::kAuto && oo != OffloadDevice::kAuto)
    r.Fail("zero_optimization",
           "zero_optimization.offload_param.device auto needs offload_optimizer.device auto too "
           "(the parameters swap with the optimizer states)");
  const bool swaps = oo == OffloadDevice::kNvme || oo == OffloadDevice::kAuto ||
                     (c->zero.stage == 3 && op == OffloadDevice::kNvme);
  if (c->aio.present && !swaps)
    r.Warn(
        "\"aio\" configures the NVMe swapper's I/O engine, and this job swaps nothing to NVMe "
        "(offload_optimizer / offload_param device nvme); it changes nothing here");
  CheckRecovery(r, *c, swaps);
  // On a GPU the states stay on the device unless the optimizer is offloaded; the parameter
  // shards follow the states (DeepSpeed could keep them on the CPU alone).
  if (c->device.type == DeviceType::kCuda && c->zero.stage == 3 &&
      c->zero.offload_param.device == OffloadDevice::kCpu &&
      c->zero.offload_optimizer.device == OffloadDevice::kNone)
    r.Warn(
        "\"zero_optimization.offload_param.device\": cpu without offload_optimizer keeps the "
        "parameter shards on the GPU with the other model states; add offload_optimizer: "
        "{device: cpu} to hold them (and the optimizer) on the host");
}

void ParseRoot(const YAML::Node& doc, ParseContext* ctx, JobConfig* c) {
  namespace in = config::internal;
  MapReader r(doc, "", ctx);
  ParseTopLevelScalars(r, c);
  in::ParseOptimizer(r, &c->optimizer);
  in::ParseScheduler(r, &c->scheduler);
  in::ParsePrecision(r, &c->fp16, &c->bf16);
  in::ParseZero(r, &c->zero);
  in::ParseAio(r, &c->aio);
  in::ParseModel(r, &c->model);
  in::ParseData(r, c->seed, &c->data);
  in::ParseCheckpoint(r, &c->checkpoint);
  in::ParseMonitor(r, &c->monitor);
  in::ParseFaultTolerance(r, &c->fault_tolerance);
  in::ParseElasticity(r, &c->elasticity);
  in::ParseDeepSpeedMonitor(r, &c->monitor);
  // As in DeepSpeed, the flops profiler turns wall_clock_breakdown on (its latencies).
  if (c->monitor.flops_profiler.enabled) c->wall_clock_breakdown = true;
  in::ParseTraining(r, &c->train_iters, &c->recompute);
  in::ParseActivationCheckpointing(r, &c->recompute);
  in::ParseDevice(r, &c->device);
  in::ParseRlhf(r, &c->rlhf.chat, &c->rlhf.step);
  in::ParseHybridEngine(r, &c->hybrid_engine);
  const bool tensor_given = in::ParseParallel(r, &c->parallel);
  // DeepSpeed's Ulysses size is a top-level key; parallel.ulysses is ours (they must agree).
  int64_t sp = 0;
  if (r.Get("sequence_parallel_size", &sp)) {
    r.Require(c->parallel.ulysses == 1 || c->parallel.ulysses == sp, "sequence_parallel_size",
              "must equal parallel.ulysses " + std::to_string(c->parallel.ulysses));
    r.Require(sp >= 1, "sequence_parallel_size", "must be >= 1");
    r.Require(sp == 1 || !c->parallel.auto_layout, "sequence_parallel_size",
              "contradicts parallel: auto (the planner picks the Ulysses size): remove one");
    c->parallel.ulysses = static_cast<int>(sp);
  }
  in::ParseTensorParallel(r, &c->parallel, tensor_given);
  in::ParsePipeline(r, &c->pipeline, &c->parallel, c->parallel.pipeline_given);
  for (const char* key : kUnsupportedTopLevel) r.Unsupported(key);
  r.Finish();
  CrossCheck(r, c);
}

}  // namespace

StatusOr<JobConfig> ParseJobConfig(const std::string& text, const std::string& source_name) {
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const std::exception& e) {
    return InvalidArgumentError(source_name + ": " + e.what());
  }
  if (doc.IsNull()) return InvalidArgumentError(source_name + ": the config is empty");
  if (!doc.IsMap()) {
    return InvalidArgumentError(source_name + ": expected a map of keys at the top level");
  }
  JobConfig config;
  config.source = source_name;
  ParseContext ctx;
  ctx.source = source_name;
  try {
    ParseRoot(doc, &ctx, &config);
  } catch (const std::exception& e) {  // yaml-cpp accessors may still throw on odd documents
    ctx.Fail(e.what());
  }
  if (!ctx.error.ok()) return ctx.error;
  config.warnings = std::move(ctx.warnings);
  for (const std::string& w : config.warnings) DS_LOG_WARN("config", "{}", w);
  return config;
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoToStatus(errno, "open(" + path + ")");
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return ErrnoToStatus(err, "read(" + path + ")");
  return ParseJobConfig(text, path);
}

const char* OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kSGD:
      return "SGD";
  }
  return "?";
}

const char* SchedulerTypeName(SchedulerType type) {
  switch (type) {
    case SchedulerType::kNone:
      return "none";
    case SchedulerType::kWarmupLR:
      return "WarmupLR";
    case SchedulerType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR:
      return "WarmupCosineLR";
  }
  return "?";
}

}  // namespace ds::config
