// The DeepSpeed blocks: optimizer, scheduler, fp16 / bf16, zero_optimization.
// Keys, defaults and meaning follow shared/reference/deepspeed.md sections 2.2-2.6.

#include <cctype>
#include <string>
#include <utility>

#include "runtime/config/job_config_internal.h"

namespace ds::config::internal {
namespace {

// DeepSpeed optimizers we know of but do not implement (lower case).
constexpr const char* kOtherDeepSpeedOptimizers[] = {
    "lamb",    "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "muadam",
    "muadamw", "musgd",      "lion",        "muon",       "cpuadam"};

void ParseAdamParams(MapReader& p, OptimizerConfig* o) {
  if (p.GetPair("betas", &o->beta1, &o->beta2)) {
    const bool ok = o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1;
    p.Require(ok, "betas", "both betas must be in [0, 1)");
  }
  p.Get("eps", &o->eps);
  p.Require(o->eps >= 0, "eps", "must be >= 0");
  p.Get("adam_w_mode", &o->adam_w_mode);
  p.Inert("torch_adam", false,
          "ds-runtime's fused Adam(W) computes torch.optim.Adam(W)'s update (runtime/optim)");
  p.Get("bias_correction", &o->bias_correction);
  // DeepSpeed's FusedAdam refuses AMSGrad (RuntimeError: "FusedAdam does not support the
  // AMSGrad variant"), and so do we, rather than train something else.
  bool amsgrad = false;
  p.Get("amsgrad", &amsgrad);
  p.Require(!amsgrad, "amsgrad",
            "AMSGrad is not supported (DeepSpeed's FusedAdam refuses it too); remove it or set "
            "false");
}

void ParseSgdParams(MapReader& p, OptimizerConfig* o) {
  p.Get("momentum", &o->momentum);
  p.Require(o->momentum >= 0 && o->momentum < 1, "momentum", "must be in [0, 1)");
  double dampening = 0;
  p.Get("dampening", &dampening);
  p.Require(dampening == 0, "dampening", "only 0 is supported (plain momentum)");
  bool nesterov = false;
  p.Get("nesterov", &nesterov);
  p.Require(!nesterov, "nesterov", "only false is supported (SGD with plain momentum)");
}

void ParseOffload(MapReader& zero, const char* key, bool optimizer, OffloadConfig* o) {
  MapReader r = zero.Block(key);
  std::string device;
  if (r.Get("device", &device)) {
    const std::string d = Lower(device);
    if (d == "none") {
      o->device = OffloadDevice::kNone;
    } else if (d == "cpu") {
      o->device = OffloadDevice::kCpu;
    } else if (d == "nvme") {
      o->device = OffloadDevice::kNvme;
    } else if (d == "auto") {
      o->device = OffloadDevice::kAuto;
    } else {
      r.Fail("device", "must be none, cpu, nvme or auto, got \"" + device + "\"");
    }
  }
  r.Get("nvme_path", &o->nvme_path);
  r.Require(o->device != OffloadDevice::kNvme || !o->nvme_path.empty(), "device",
            "nvme needs nvme_path");
  r.Require(o->device != OffloadDevice::kAuto || !o->nvme_path.empty(), "device",
            "auto (parallel: auto chooses none or nvme) needs nvme_path");
  r.Get("buffer_count", &o->buffer_count);
  r.Require(o->buffer_count >= 1, "buffer_count", "must be >= 1");
  if (r.Get("pin_memory", &o->pin_memory) && o->pin_memory)
    r.Warn("\"" + r.KeyPath("pin_memory") +
           "\" has no effect: the swap buffers are allocated once, and a device's host staging is "
           "always page-locked");
  if (optimizer) {
    r.Get("pipeline_read", &o->pipeline_read);
    r.Get("pipeline_write", &o->pipeline_write);
    if (r.Get("fast_init", &o->fast_init) && o->fast_init)
      r.Warn("\"" + r.KeyPath("fast_init") +
             "\" has no effect: initialization always streams into the swap files");
    r.Get("ratio", &o->ratio);
    r.Require(o->ratio > 0 && o->ratio <= 1, "ratio", "must be in (0, 1]");
    if (o->ratio < 1)
      r.Warn("\"" + r.KeyPath("ratio") + "\" " + std::to_string(o->ratio) +
             ": a partial optimizer offload is not supported; all of it is offloaded");
    r.Unsupported("pipeline");
    for (const char* key : {"super_offload", "cpuadam_cores_perc"}) r.Unsupported(key);
    r.Inert("convert_grad_on_cpu", true, "16-bit gradients are widened on the host already");
  } else {
    r.Get("buffer_size", &o->buffer_size);
    r.Require(o->buffer_size > 0, "buffer_size", "must be > 0");
    if (r.Get("max_in_cpu", &o->max_in_cpu))
      r.Warn("\"" + r.KeyPath("max_in_cpu") +
             "\" has no effect: with nvme each unit is swapped in before its gather and dropped "
             "after it; with cpu the whole shard stays in memory");
    r.Require(o->max_in_cpu > 0, "max_in_cpu", "must be > 0");
  }
  r.Finish();
}

// zero_optimization keys DeepSpeed knows that change nothing we implement yet.
constexpr const char* kUnsupportedZeroKeys[] = {"load_from_fp32_weights",
                                                "elastic_checkpoint",
                                                "ignore_unused_parameters",
                                                "legacy_stage1",
                                                "gather_16bit_weights_on_model_save",
                                                "stage3_gather_16bit_weights_on_model_save",
                                                "stage3_gather_fp16_weights_on_model_save",
                                                "use_multi_rank_bucket_allreduce",
                                                "model_persistence_threshold",
                                                "stage3_model_persistence_threshold",
                                                "module_granularity_threshold",
                                                "stage3_module_granularity_threshold",
                                                "enable_sanity_checks",
                                                "allgather_sequential",
                                                "stage3_allgather_sequential",
                                                "partition_stream_chunk_size",
                                                "stage3_partition_stream_chunk_size",
                                                "save_muon_momentum_buffer_in_memory",
                                                "leaf_module",
                                                "zenflow",
                                                "use_all_reduce_for_fetch_params",
                                                "stage3_use_all_reduce_for_fetch_params",
                                                "zero_quantized_nontrainable_weights",
                                                "zeropp_loco_param",
                                                "memory_efficient_linear",
                                                "pipeline_loading_checkpoint",
                                                "override_module_apply",
                                                "log_trace_cache_warnings"};

// DeepSpeed's deprecated ZeRO-Offload switches, with their meaning: cpu_offload: true is
// offload_optimizer {device: cpu}, cpu_offload_param: true is offload_param {device: cpu}.
// Given beside the block that replaces them they are an error, as in DeepSpeed;
// cpu_offload_use_pin_memory has no effect there either, and warns.
void ParseLegacyOffload(MapReader& r, ZeroConfig* z) {
  struct Legacy {
    const char* key;
    const char* block;
    OffloadConfig* target;
  };
  for (const Legacy& l : {Legacy{"cpu_offload", "offload_optimizer", &z->offload_optimizer},
                          Legacy{"cpu_offload_param", "offload_param", &z->offload_param}}) {
    bool on = false;
    if (!r.Get(l.key, &on)) continue;
    if (r.Has(l.block)) {
      r.Fail(l.key, std::string("is the deprecated form of ") + l.block +
                        ", which is given too: keep " + l.block);
      continue;
    }
    if (on) l.target->device = OffloadDevice::kCpu;
    r.Warn("\"" + r.KeyPath(l.key) + "\" is deprecated; read as " + l.block +
           (on ? ": {device: cpu}" : ": none"));
  }
  bool pin = false;
  if (r.Get("cpu_offload_use_pin_memory", &pin))
    r.Warn("\"" + r.KeyPath("cpu_offload_use_pin_memory") +
           "\" is deprecated and has no effect (as in DeepSpeed); use offload_*.pin_memory");
}

// ZeRO++ (stage 3 only, as in DeepSpeed): hpZ's secondary partition size, qwZ and qgZ. MiCS is
// refused with its reason.
void ParseZeroPlusPlus(MapReader& r, ZeroConfig* z) {
  r.Get("zero_hpz_partition_size", &z->hpz_partition_size);
  r.Require(z->hpz_partition_size >= 1, "zero_hpz_partition_size",
            "must be >= 1 (1: no secondary partition)");
  r.Get("zero_quantized_weights", &z->quantized_weights);
  r.Get("zero_quantized_gradients", &z->quantized_gradients);
  const std::pair<const char*, bool> parts[] = {
      {"zero_hpz_partition_size", z->hpz_partition_size > 1},
      {"zero_quantized_weights", z->quantized_weights},
      {"zero_quantized_gradients", z->quantized_gradients}};
  for (const auto& [key, on] : parts)
    r.Require(!on || z->stage == 3, key, "is ZeRO++, which needs stage 3");
  int64_t mics = -1;
  if (r.Get("mics_shard_size", &mics) && mics > 0)
    r.Fail("mics_shard_size",
           "MiCS is not supported: it replicates the model states over groups of that many "
           "ranks; use zero_hpz_partition_size (hpZ) to keep stage 3's backward gathers inside a "
           "node with the states still sharded over every rank");
  bool hierarchical = false;
  if (r.Get("mics_hierarchical_params_gather", &hierarchical) && hierarchical)
    r.Fail("mics_hierarchical_params_gather",
           "is MiCS's, which is not supported (see "
           "mics_shard_size)");
}

}  // namespace

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void ParseOptimizer(MapReader& root, OptimizerConfig* o) {
  MapReader r = root.Block("optimizer");
  o->specified = r.present();
  std::string type;
  if (!r.Get("type", &type) && r.present()) r.Fail("type", "is required (Adam, AdamW or SGD)");
  const std::string t = Lower(type);
  if (t == "adam") {
    o->type = OptimizerType::kAdam;
  } else if (t == "adamw") {
    o->type = OptimizerType::kAdamW;
  } else if (t == "sgd") {
    o->type = OptimizerType::kSGD;
  } else if (!t.empty()) {
    bool known = false;
    for (const char* name : kOtherDeepSpeedOptimizers) known = known || t == name;
    r.Fail("type", (known ? "DeepSpeed optimizer \"" + type + "\" is not supported yet"
                          : "unknown optimizer \"" + type + "\"") +
                       " (supported: Adam, AdamW, SGD)");
  }
  MapReader p = r.Block("params");
  p.Get("lr", &o->lr);
  p.Require(o->lr >= 0, "lr", "must be >= 0");
  p.Get("weight_decay", &o->weight_decay);
  p.Require(o->weight_decay >= 0, "weight_decay", "must be >= 0");
  if (o->type == OptimizerType::kSGD) {
    ParseSgdParams(p, o);
  } else {
    ParseAdamParams(p, o);
  }
  // DeepSpeed: AdamW always decouples weight decay, whatever adam_w_mode says.
  if (o->type == OptimizerType::kAdamW) o->adam_w_mode = true;
  // Implementation switches of DeepSpeed's and torch's optimizers: one fused update here.
  for (const char* key :
       {"set_grad_none", "foreach", "capturable", "differentiable", "fused", "legacy_fusion"})
    p.Unsupported(key);
  bool maximize = false;
  p.Get("maximize", &maximize);
  p.Require(!maximize, "maximize", "only false is supported (the optimizer minimises the loss)");
  p.Inert("fp32_optimizer_states", true, "the optimizer states are always fp32");
  p.Known("max_grad_norm");
  if (p.Has("max_grad_norm")) {
    p.Fail("max_grad_norm", "is not an optimizer parameter; use the top-level gradient_clipping");
  }
  p.Finish();
  r.Unsupported("legacy_fusion");
  r.Finish();
}

void ParseScheduler(MapReader& root, SchedulerConfig* s) {
  MapReader r = root.Block("scheduler");
  std::string type;
  if (!r.Get("type", &type) && r.present()) {
    r.Fail("type", "is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  }
  const std::string t = Lower(type);
  if (t == "warmuplr") {
    s->type = SchedulerType::kWarmupLR;
  } else if (t == "warmupdecaylr") {
    s->type = SchedulerType::kWarmupDecayLR;
  } else if (t == "warmupcosinelr") {
    s->type = SchedulerType::kWarmupCosineLR;
  } else if (!t.empty()) {
    const bool known = t == "lrrangetest" || t == "onecycle";
    r.Fail("type", (known ? "DeepSpeed scheduler \"" + type + "\" is not supported yet"
                          : "unknown scheduler \"" + type + "\"") +
                       " (supported: WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  }
  MapReader p = r.Block("params");
  if (s->type == SchedulerType::kWarmupCosineLR) {
    p.Get("warmup_min_ratio", &s->warmup_min_ratio);
    p.Require(s->warmup_min_ratio >= 0 && s->warmup_min_ratio <= 1, "warmup_min_ratio",
              "must be in [0, 1]");
    p.Get("cos_min_ratio", &s->cos_min_ratio);
    p.Require(s->cos_min_ratio >= 0 && s->cos_min_ratio <= 1, "cos_min_ratio", "must be in [0, 1]");
  } else {
    p.Get("warmup_min_lr", &s->warmup_min_lr);
    p.Require(s->warmup_min_lr >= 0, "warmup_min_lr", "must be >= 0");
    p.Get("warmup_max_lr", &s->warmup_max_lr);
    p.Require(s->warmup_max_lr >= 0, "warmup_max_lr", "must be >= 0");
  }
  p.Get("warmup_num_steps", &s->warmup_num_steps);
  p.Require(s->warmup_num_steps >= 0, "warmup_num_steps", "must be >= 0");
  std::string warmup_type;
  if (p.Get("warmup_type", &warmup_type)) {
    if (warmup_type == "log") {
      s->warmup_type = WarmupType::kLog;
    } else if (warmup_type == "linear") {
      s->warmup_type = WarmupType::kLinear;
    } else {
      p.Fail("warmup_type", "must be \"log\" or \"linear\", got \"" + warmup_type + "\"");
    }
  }
  p.Inert("last_batch_iteration", -1.0,
          "the schedule resumes from the checkpoint's step, not from this number");
  if (s->type == SchedulerType::kWarmupDecayLR || s->type == SchedulerType::kWarmupCosineLR) {
    if (!p.Get("total_num_steps", &s->total_num_steps)) {
      p.Fail("total_num_steps", std::string("is required by ") + SchedulerTypeName(s->type));
    }
    p.Require(s->total_num_steps >= 1, "total_num_steps", "must be >= 1");
  }
  p.Finish();
  r.Finish();
}

// "enabled": "auto" (HuggingFace fills it from its --fp16 / --bf16 flags; DeepSpeed drops
// "auto" values and keeps the default): off here, with a warning saying so.
bool AutoOff(MapReader& r, const char* key) {
  if (!r.IsAuto(key)) return false;
  r.Warn("\"" + r.KeyPath(key) +
         "\": \"auto\" is false here (DeepSpeed's default; no Trainer to fill it): say true "
         "to enable it");
  return true;
}

void ParsePrecision(MapReader& root, Fp16Config* f, Bf16Config* b) {
  MapReader fp = root.Block("fp16");
  if (!AutoOff(fp, "enabled")) fp.Get("enabled", &f->enabled);
  for (const char* key : {"fp16_master_weights_and_grads", "fused_mode"}) fp.Unsupported(key);
  fp.Inert("auto_cast", false,
           "every op runs in the model's precision; there are no fp32 inputs to cast");
  fp.Get("loss_scale", &f->loss_scale);
  fp.Require(f->loss_scale >= 0, "loss_scale", "must be >= 0 (0 = dynamic)");
  fp.Get("initial_scale_power", &f->initial_scale_power);
  fp.Require(f->initial_scale_power >= 0 && f->initial_scale_power < 64, "initial_scale_power",
             "must be in [0, 63]");
  fp.Get("loss_scale_window", &f->loss_scale_window);
  fp.Require(f->loss_scale_window >= 1, "loss_scale_window", "must be >= 1");
  fp.Get("hysteresis", &f->hysteresis);
  fp.Require(f->hysteresis >= 1, "hysteresis", "must be >= 1");
  fp.Get("consecutive_hysteresis", &f->consecutive_hysteresis);
  fp.Get("min_loss_scale", &f->min_loss_scale);
  fp.Require(f->min_loss_scale > 0, "min_loss_scale", "must be > 0");
  fp.Finish();

  // bfloat16 is DeepSpeed's legacy name for the same block.
  const char* bf16_key = root.Has("bfloat16") ? "bfloat16" : "bf16";
  root.Known("bfloat16");
  if (root.Has("bf16") && root.Has("bfloat16")) {
    root.Fail("bfloat16", "is an alias of \"bf16\"; give only one");
  }
  MapReader bf = root.Block(bf16_key);
  if (!AutoOff(bf, "enabled")) bf.Get("enabled", &b->enabled);
  for (const char* key : {"check_grad_overflow", "check_overflow", "bf16_master_weights_and_grads",
                          "bf16_optimizer_states"})
    bf.Unsupported(key);
  bf.Inert("immediate_grad_update", false,
           "16-bit gradients accumulate into the fp32 flat gradients after each micro-batch's "
           "backward, as they do now");
  bf.Finish();
  if (f->enabled && b->enabled) {
    root.Fail(bf16_key, "fp16 and bf16 cannot both be enabled");
  }
}

void ParseZero(MapReader& root, ZeroConfig* z) {
  MapReader r = root.Block("zero_optimization");
  r.Get("stage", &z->stage);
  r.Require(z->stage >= 0 && z->stage <= 3, "stage", "must be 0, 1, 2 or 3");
  r.Inert("contiguous_gradients", true,
          "gradients are always copied into contiguous buckets (the plan's arenas)");
  r.Get("reduce_scatter", &z->reduce_scatter);
  if (r.IsAuto("reduce_bucket_size"))
    z->auto_keys.push_back("reduce_bucket_size");
  else
    r.Get("reduce_bucket_size", &z->reduce_bucket_size);
  r.Require(z->reduce_bucket_size > 0, "reduce_bucket_size", "must be > 0");
  r.Inert("allgather_partitions", true,
          "the updated partitions are always all-gathered (no broadcast mode)");
  r.Get("allgather_bucket_size", &z->allgather_bucket_size);
  r.Require(z->allgather_bucket_size > 0, "allgather_bucket_size", "must be > 0");
  // DeepSpeed: overlap_comm unset means true for stage 3, false otherwise.
  if (!r.Get("overlap_comm", &z->overlap_comm)) z->overlap_comm = z->stage == 3;
  r.Inert("round_robin_gradients", false,
          "gradients are partitioned by contiguous ranges, never round-robin");
  r.Get("sub_group_size", &z->sub_group_size);
  r.Require(z->sub_group_size > 0, "sub_group_size", "must be > 0");
  // stage3_* names and their newer short aliases.
  auto limit = [&r, z](const char* key, const char* alias, int64_t* out) {
    if (r.IsAuto(key) || r.IsAuto(alias)) {  // derived from the model (ResolveAutoBuckets)
      r.Known(key);
      r.Known(alias);
      z->auto_keys.push_back(alias);
      return;
    }
    r.GetAlias({key, alias}, out);
    r.Require(*out >= 0, r.Has(alias) ? alias : key, "must be >= 0");
  };
  limit("stage3_prefetch_bucket_size", "prefetch_bucket_size", &z->prefetch_bucket_size);
  limit("stage3_max_live_parameters", "max_live_parameters", &z->max_live_parameters);
  limit("stage3_max_reuse_distance", "max_reuse_distance", &z->max_reuse_distance);
  limit("stage3_param_persistence_threshold", "param_persistence_threshold",
        &z->param_persistence_threshold);
  ParseOffload(r, "offload_optimizer", /*optimizer=*/true, &z->offload_optimizer);
  ParseOffload(r, "offload_param", /*optimizer=*/false, &z->offload_param);
  ParseLegacyOffload(r, z);
  const OffloadConfig& oo = z->offload_optimizer;
  if (oo.device != OffloadDevice::kNone && oo.device != OffloadDevice::kAuto) {
    // NVMe optimizer offload works at stages 1-3 here (DeepSpeed: stage 3 only).
    r.Require(z->stage >= 1, "offload_optimizer", "optimizer offload needs stage 1, 2 or 3");
    r.Require(oo.ratio == 1.0 || z->stage == 3, "offload_optimizer",
              "a partial offload ratio needs stage 3");
  }
  if (z->offload_param.device != OffloadDevice::kNone &&
      z->offload_param.device != OffloadDevice::kAuto && z->stage != 3) {
    // DeepSpeed ignores it below stage 3; so do we, but say so.
    r.Warn("\"" + r.KeyPath("offload_param") + "\" has no effect below stage 3; ignored");
  }
  ParseZeroPlusPlus(r, z);
  for (const char* key : kUnsupportedZeroKeys) r.Unsupported(key);
  r.Finish();
}

// DeepSpeed's aio block. DeepSpeed itself now ignores thread_count silently; here it is the
// old name of intra_op_parallelism, with a warning. use_gds (GPUDirect Storage) warns.
void ParseAio(MapReader& root, AioConfig* a) {
  MapReader r = root.Block("aio");
  a->present = r.present();
  r.Get("block_size", &a->block_size);
  r.Require(a->block_size > 0 && a->block_size % 4096 == 0, "block_size",
            "must be a positive multiple of 4096 bytes");
  r.Get("queue_depth", &a->queue_depth);
  r.Require(a->queue_depth >= 1 && a->queue_depth <= 4096, "queue_depth", "must be in 1..4096");
  const bool has_new = r.Get("intra_op_parallelism", &a->intra_op_parallelism);
  int threads = 0;
  if (r.Get("thread_count", &threads)) {
    r.Warn("\"" + r.KeyPath("thread_count") + "\" is the old name of intra_op_parallelism" +
           (has_new ? "; intra_op_parallelism is given too and wins" : "; read as it"));
    if (!has_new) a->intra_op_parallelism = threads;
  }
  r.Require(a->intra_op_parallelism >= 1 && a->intra_op_parallelism <= 64,
            has_new ? "intra_op_parallelism" : "thread_count", "must be in 1..64");
  r.Get("single_submit", &a->single_submit);
  r.Get("overlap_events", &a->overlap_events);
  r.Unsupported("io_backend");  // newer DeepSpeed: the async_io engine is the one here
  bool gds = false;
  if (r.Get("use_gds", &gds) && gds)
    r.Warn("\"" + r.KeyPath("use_gds") +
           "\": GPUDirect Storage is not supported; the swapper reads into host memory");
  r.Finish();
}

// DeepSpeed's activation_checkpointing block: its presence means full recompute (every
// transformer block's input kept, its forward run again before its backward) unless
// training.recompute chose; partition_activations splits those inputs over the tensor-parallel
// group. The keys that would change how checkpoints are stored otherwise warn, saying what
// happens instead.
void ParseActivationCheckpointing(MapReader& root, RecomputeConfig* recompute) {
  MapReader r = root.Block("activation_checkpointing");
  if (!r.present()) return r.Finish();
  if (!recompute->given) recompute->mode = "full";
  recompute->given = true;
  bool on = false;
  r.Get("partition_activations", &recompute->partition_activations);
  r.Get("cpu_checkpointing", &recompute->cpu_checkpointing);
  int64_t n = 0;
  if (r.IsFalse("number_checkpoints")) {
    // `false` (some public configs): no number, nothing to warn about.
  } else if (r.Get("number_checkpoints", &n))
    r.Warn("\"" + r.KeyPath("number_checkpoints") +
           "\" changes nothing: the planner keeps every block's input and sizes their buffer");
  if (r.Get("contiguous_memory_optimization", &on) && on)
    r.Warn("\"" + r.KeyPath("contiguous_memory_optimization") +
           "\" changes nothing: kept activations already live in one arena");
  for (const char* key : {"synchronize_checkpoint_boundary", "profile"})
    if (r.Get(key, &on) && on) r.Warn("\"" + r.KeyPath(key) + "\" is not supported; ignored");
  r.Finish();
}

}  // namespace ds::config::internal
