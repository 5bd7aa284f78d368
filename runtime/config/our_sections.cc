// Our own blocks: model, data, checkpoint, monitor, training, device, parallel, pipeline.

#include <cstdlib>
#include <string>

#include "runtime/config/job_config_internal.h"
#include "runtime/data/format/blend.h"

namespace ds::config::internal {
namespace {

// Generator settings; with `model.graph` none of them may be given.
constexpr const char* kGeneratorKeys[] = {"family",    "n_layer",    "n_embd",         "n_head",
                                          "n_kv_head", "vocab_size", "max_seq_len",    "ffn_hidden",
                                          "dropout",   "rope_theta", "tie_embeddings", "moe",
                                          "head",      "pad_mask"};

void ReadMoe(MapReader& parent, MoeConfig* m) {
  MapReader r = parent.Block("moe");
  r.Get("num_experts", &m->num_experts);
  r.Require(m->num_experts >= 0, "num_experts", "must be >= 0 (0 = dense)");
  r.Get("expert_interval", &m->expert_interval);
  r.Require(m->expert_interval >= 1, "expert_interval", "must be >= 1");
  r.Get("top_k", &m->top_k);
  r.Require(m->top_k == 1 || m->top_k == 2, "top_k", "must be 1 or 2");
  r.Require(m->num_experts == 0 || m->top_k <= m->num_experts, "top_k",
            "must not exceed num_experts " + std::to_string(m->num_experts));
  r.Get("capacity_factor", &m->capacity_factor);
  r.Require(m->capacity_factor > 0, "capacity_factor", "must be > 0");
  r.Get("eval_capacity_factor", &m->eval_capacity_factor);
  r.Require(m->eval_capacity_factor > 0, "eval_capacity_factor", "must be > 0");
  r.Get("min_capacity", &m->min_capacity);
  r.Require(m->min_capacity >= 0, "min_capacity", "must be >= 0");
  r.Get("drop_tokens", &m->drop_tokens);
  r.Get("use_residual", &m->use_residual);
  if (r.Get("noisy_gate_policy", &m->noisy_gate_policy)) {
    m->noisy_gate_policy = Lower(m->noisy_gate_policy);
    if (m->noisy_gate_policy == "null") m->noisy_gate_policy = "none";
    r.Require(m->noisy_gate_policy == "none" || m->noisy_gate_policy == "rsample",
              "noisy_gate_policy", "must be None or RSample (Jitter is not supported)");
  }
  r.Get("top2_2nd_expert_sampling", &m->top2_2nd_expert_sampling);
  r.Get("use_rts", &m->use_rts);
  r.Get("moe_loss_coeff", &m->moe_loss_coeff);
  r.Require(m->moe_loss_coeff >= 0, "moe_loss_coeff", "must be >= 0");
  r.Get("expert_ffn_hidden", &m->expert_ffn_hidden);
  r.Require(m->expert_ffn_hidden >= 0, "expert_ffn_hidden", "must be >= 0 (0 = ffn_hidden)");
  r.Finish();
}

void ReadGenerator(MapReader& r, ModelConfig* m) {
  std::string family;
  if (!r.Get("family", &family)) {
    r.Fail("family", "is required unless model.graph is given (gpt2 or llama)");
  } else if (Lower(family) == "gpt2") {
    m->family = ModelFamily::kGpt2;
  } else if (Lower(family) == "llama") {
    m->family = ModelFamily::kLlama;
    m->tie_embeddings = false;  // Llama's default; the file may still say otherwise
  } else {
    r.Fail("family", "must be gpt2 or llama, got \"" + family + "\"");
  }
  r.Get("n_layer", &m->n_layer);
  r.Require(m->n_layer >= 1, "n_layer", "must be >= 1");
  r.Get("n_embd", &m->n_embd);
  r.Require(m->n_embd >= 1, "n_embd", "must be >= 1");
  r.Get("n_head", &m->n_head);
  r.Require(m->n_head >= 1 && m->n_embd % m->n_head == 0, "n_head",
            "must be >= 1 and divide n_embd " + std::to_string(m->n_embd));
  r.Get("n_kv_head", &m->n_kv_head);
  r.Require(m->n_kv_head >= 0 && (m->n_kv_head == 0 || m->n_head % m->n_kv_head == 0), "n_kv_head",
            "must divide n_head " + std::to_string(m->n_head) + " (0 = n_head)");
  r.Require(m->family != ModelFamily::kGpt2 || m->n_kv_head == 0 || m->n_kv_head == m->n_head,
            "n_kv_head", "gpt2 has no grouped-query attention (use llama)");
  r.Get("vocab_size", &m->vocab_size);
  r.Require(m->vocab_size >= 1, "vocab_size", "must be >= 1");
  r.Get("max_seq_len", &m->max_seq_len);
  r.Require(m->max_seq_len >= 1, "max_seq_len", "must be >= 1");
  r.Get("ffn_hidden", &m->ffn_hidden);
  r.Require(m->ffn_hidden >= 0, "ffn_hidden", "must be >= 0 (0 = family default)");
  r.Get("dropout", &m->dropout);
  r.Require(m->dropout >= 0 && m->dropout < 1, "dropout", "must be in [0, 1)");
  r.Get("rope_theta", &m->rope_theta);
  r.Require(m->rope_theta > 0, "rope_theta", "must be > 0");
  r.Get("tie_embeddings", &m->tie_embeddings);
  if (r.Get("head", &m->head)) m->head = Lower(m->head);
  r.Require(m->head == "lm" || m->head == "reward", "head",
            "must be lm (next-token logits) or reward (a value head, DeepSpeed-Chat's reward "
            "model)");
  r.Get("pad_mask", &m->pad_mask);
  if (r.Has("moe")) ReadMoe(r, &m->moe);
}

// PEFT's LoraConfig keys, or DeepSpeed-Chat's flags; not both.
void ReadLora(MapReader& parent, LoraConfig* l) {
  MapReader r = parent.Block("lora");
  l->enabled = true;
  l->dschat = r.Has("lora_dim");
  if (l->dschat) {
    for (const char* k : {"r", "lora_alpha", "target_modules", "use_rslora"})
      if (r.Has(k)) r.Fail(k, "is PEFT's name; with DeepSpeed-Chat's lora_dim use its names");
    r.Get("lora_dim", &l->r);
    l->alpha = 1;  // DeepSpeed-Chat's lora_scaling default: scale 1 / lora_dim
    r.Get("lora_scaling", &l->alpha);
    l->module_name = "decoder.layers.";  // DeepSpeed-Chat's default (OPT's names)
    r.Get("lora_module_name", &l->module_name);
    r.Require(!l->module_name.empty(), "lora_module_name", "must not be empty");
    l->freeze_base = false;
    r.Get("only_optimize_lora", &l->freeze_base);
  } else {
    for (const char* k : {"lora_scaling", "lora_module_name", "only_optimize_lora"})
      if (r.Has(k)) r.Fail(k, "is DeepSpeed-Chat's name; give lora_dim with it, or use PEFT's");
    r.Get("r", &l->r);
    l->alpha = l->r;
    r.Get("lora_alpha", &l->alpha);
    r.Get("use_rslora", &l->use_rslora);
    if (r.IsList("target_modules"))
      r.Get("target_modules", &l->target_modules);
    else
      r.Get("target_modules", &l->target_regex);
    std::string bias = "none";
    r.Get("bias", &bias);
    r.Require(bias == "none", "bias", "must be none (trained biases are not supported yet)");
    bool init = true;
    r.Get("init_lora_weights", &init);
    r.Require(init, "init_lora_weights",
              "must be true (kaiming-uniform A, zero B; false would start away from the base)");
    r.Inert("inference_mode", false, "training always trains the adapters");
    std::string task;
    if (r.Get("task_type", &task))
      r.Warn("model.lora.task_type " + task + " is PEFT's wrapper class; it changes nothing here");
  }
  r.Require(l->r >= 1, l->dschat ? "lora_dim" : "r", "must be >= 1");
  r.Require(l->alpha > 0, l->dschat ? "lora_scaling" : "lora_alpha", "must be > 0");
  r.Get("lora_dropout", &l->dropout);
  r.Require(l->dropout >= 0 && l->dropout < 1, "lora_dropout", "must be in [0, 1)");
  r.Get("save_adapter", &l->save_adapter);
  if (r.Get("adapter", &l->adapter))
    r.Require(l->freeze_base, "adapter",
              "needs the base weights frozen (only_optimize_lora true): the folder holds only the "
              "adapters");
  r.Finish();
}

}  // namespace

// model.hf: a Hugging Face folder gives the architecture (its config.json, read by the planner)
// and the initial weights; only the head, the left-pad mask and dropout are the job's to choose.
void ReadHf(MapReader& r, ModelConfig* m) {
  for (const char* key : kGeneratorKeys) {
    r.Known(key);
    const std::string k = key;
    if (k == "head" || k == "pad_mask" || k == "dropout") continue;
    if (r.Has(key)) r.Fail(key, "comes from " + m->hf + "/config.json with model.hf");
  }
  if (r.Get("head", &m->head)) m->head = Lower(m->head);
  r.Require(m->head == "lm" || m->head == "reward", "head",
            "must be lm (next-token logits) or reward (a value head, DeepSpeed-Chat's reward "
            "model)");
  r.Get("pad_mask", &m->pad_mask);
  if (r.Get("dropout", &m->dropout)) {
    m->hf_dropout_set = true;
    r.Require(m->dropout >= 0 && m->dropout < 1, "dropout", "must be in [0, 1)");
  }
}

void ParseModel(MapReader& root, ModelConfig* m) {
  MapReader r = root.Block("model");
  const bool graph = r.Get("graph", &m->graph) && !m->graph.empty();
  const bool hf = r.Get("hf", &m->hf) && !m->hf.empty();
  if (graph && hf) {
    r.Fail("hf", "cannot be combined with model.graph: one of them defines the model");
  } else if (hf) {
    ReadHf(r, m);
  } else if (graph) {
    for (const char* key : kGeneratorKeys) {
      r.Known(key);
      if (r.Has(key)) r.Fail(key, "cannot be combined with model.graph (the graph defines it)");
    }
  } else if (r.present()) {
    ReadGenerator(r, m);
  } else {
    for (const char* key : kGeneratorKeys) r.Known(key);
  }
  if (r.Has("lora")) {
    if (graph)
      r.Fail("lora",
             "needs a model the runtime builds (model.family or model.hf), not a graph "
             "file: its module names come from the family");
    else
      ReadLora(r, &m->lora);
  }
  r.Known("lora");
  r.Finish();
}

// data.path (Megatron's --data-path: a prefix, or a list of prefixes and weights), data.split,
// data.train_samples. Token files and Megatron datasets exclude each other.
void ParseMegatronData(MapReader& r, DataConfig* d) {
  if (r.GetList("path", &d->path)) {
    Status blend = data::ParseBlend(d->path).status();
    if (!blend.ok()) r.Fail("path", blend.message());
  }
  r.Get("split", &d->split);
  r.Get("train_samples", &d->train_samples);
  r.Require(d->train_samples >= 0, "train_samples", "must be >= 0 (0 = train_iters x batch)");
  if (!d->megatron()) {
    for (const char* key : {"split", "train_samples"})
      if (r.Has(key)) r.Fail(key, "needs data.path (the Megatron datasets it applies to)");
    return;
  }
  for (const char* key : {"train", "validation", "format", "shuffle"})
    if (r.Has(key))
      r.Fail(key, "cannot be combined with data.path: token files or Megatron datasets, not both");
  Status split = data::SplitRanges(d->split, 1000).status();
  if (!split.ok()) r.Fail("split", split.message());
}

// data.sft: {prompt, answer, validation_prompt, validation_answer, max_prompt_seq_len,
// max_answer_seq_len}: one pair of datasets instead of token files or data.path.
void ParseSft(MapReader& data, DataConfig* d) {
  MapReader r = data.Block("sft");
  DataConfig::Sft& s = d->sft;
  r.Get("prompt", &s.prompt);
  r.Get("answer", &s.answer);
  r.Get("validation_prompt", &s.validation_prompt);
  r.Get("validation_answer", &s.validation_answer);
  r.Get("max_prompt_seq_len", &s.max_prompt_seq_len);
  r.Get("max_answer_seq_len", &s.max_answer_seq_len);
  r.Require(s.max_prompt_seq_len >= 0, "max_prompt_seq_len", "must be >= 0 (0 = seq_len)");
  r.Require(s.max_answer_seq_len >= 0, "max_answer_seq_len", "must be >= 0 (0 = seq_len)");
  std::string padding = "right";
  r.Get("padding", &padding);
  r.Require(padding == "right" || padding == "left", "padding", "must be right or left");
  s.left_padding = padding == "left";
  if (r.present()) {
    r.Require(!s.prompt.empty() && !s.answer.empty(), "prompt",
              "and data.sft.answer are both required (the datasets ds-data preprocess "
              "--json-keys prompt chosen writes)");
    r.Require(s.validation_prompt.empty() == s.validation_answer.empty(), "validation_prompt",
              "and data.sft.validation_answer go together");
  }
  r.Finish();
  if (!r.present()) return;
  for (const char* key : {"train", "validation", "format", "path"})
    if (data.Has(key)) data.Fail(key, "cannot be combined with data.sft");
  for (const char* key : {"reset_position_ids", "reset_attention_mask", "eod_mask_loss"})
    if (data.Has(key)) data.Fail(key, "applies to packed documents, not to data.sft's rows");
}

void ParseData(MapReader& root, uint64_t job_seed, DataConfig* d) {
  MapReader r = root.Block("data");
  r.Get("train", &d->train);
  r.Get("validation", &d->validation);
  std::string format;
  if (r.Get("format", &format)) {
    const std::string f = Lower(format);
    if (f == "auto") {
      d->format = config::TokenFormat::kAuto;
    } else if (f == "ds") {
      d->format = config::TokenFormat::kDs;
    } else if (f == "uint16") {
      d->format = config::TokenFormat::kUint16;
    } else if (f == "llmc") {
      d->format = config::TokenFormat::kLlmc;
    } else {
      r.Fail("format", "must be auto, ds, uint16 or llmc, got \"" + format + "\"");
    }
  }
  r.Get("seq_len", &d->seq_len);
  r.Require(d->seq_len >= 0, "seq_len", "must be >= 0 (0 = model.max_seq_len)");
  r.Get("shuffle", &d->shuffle);
  d->seed = job_seed;
  r.Get("seed", &d->seed);
  ParseMegatronData(r, d);
  r.Get("reset_position_ids", &d->reset_position_ids);
  r.Get("reset_attention_mask", &d->reset_attention_mask);
  r.Get("eod_mask_loss", &d->eod_mask_loss);
  r.Get("eod_token", &d->eod_token);
  const bool masks = d->reset_position_ids || d->reset_attention_mask || d->eod_mask_loss;
  r.Require(!masks || d->eod_token >= 0, "eod_token",
            "is required (>= 0) with reset_position_ids, reset_attention_mask or eod_mask_loss: "
            "the end-of-document id the documents are cut at");
  ParseSft(r, d);
  if (!masks && !d->supervised() && r.Has("eod_token"))
    r.Warn(
        "data.eod_token changes nothing without data.sft, reset_position_ids, "
        "reset_attention_mask or eod_mask_loss");
  r.Finish();
}

void ParseCheckpoint(MapReader& root, CheckpointConfig* c) {
  MapReader r = root.Block("checkpoint");
  r.Get("dir", &c->dir);
  r.Get("save_interval", &c->save_interval);
  r.Require(c->save_interval >= 0, "save_interval", "must be >= 0 (0 = only at the end)");
  r.Get("keep_last", &c->keep_last);
  r.Require(c->keep_last >= 0, "keep_last", "must be >= 0 (0 = keep all)");
  r.Get("load", &c->load);
  r.Require(c->load != "latest" || !c->dir.empty(), "load", "\"latest\" needs checkpoint.dir");
  // DeepSpeed's own checkpoint keys share this block.
  for (const char* key : {"tag_validation", "load_universal", "use_node_local_storage",
                          "parallel_write", "checkpoint_serialization", "writer"}) {
    r.Unsupported(key);
  }
  r.Finish();
}

void ParseMonitor(MapReader& root, MonitorConfig* m) {
  MapReader r = root.Block("monitor");
  r.Get("csv", &m->csv);
  r.Get("log_interval", &m->log_interval);
  r.Require(m->log_interval >= 1, "log_interval", "must be >= 1");
  r.Get("eval_interval", &m->eval_interval);
  r.Require(m->eval_interval >= 0, "eval_interval", "must be >= 0 (0 = never)");
  r.Get("eval_iters", &m->eval_iters);
  r.Require(m->eval_iters >= 1, "eval_iters", "must be >= 1");
  r.Finish();
}

void ParseTraining(MapReader& root, int64_t* train_iters, RecomputeConfig* recompute) {
  MapReader r = root.Block("training");
  r.Get("train_iters", train_iters);
  r.Require(*train_iters >= 0, "train_iters", "must be >= 0");
  if (r.Get("recompute", &recompute->mode)) {
    recompute->given = true;
    r.Require(
        recompute->mode == "none" || recompute->mode == "selective" || recompute->mode == "full",
        "recompute", "must be none, selective or full");
  }
  r.Finish();
}

void ParseRlhf(MapReader& root, std::string* chat, std::string* step) {
  MapReader r = root.Block("rlhf");
  r.Get("chat", chat);
  r.Get("step", step);
  r.Require(*step == "all" || *step == "sft" || *step == "reward" || *step == "ppo", "step",
            "must be sft, reward, ppo or all");
  r.Finish();
}

// DeepSpeed's hybrid_engine (an RLHF actor's job file; runtime/rlhf's rollouts read it).
void ParseHybridEngine(MapReader& root, HybridEngineConfig* h) {
  MapReader r = root.Block("hybrid_engine");
  r.Inert("enabled", true,
          "the actor always generates from its own training weights (the hybrid engine's way)");
  r.Get("max_out_tokens", &h->max_out_tokens);
  r.Require(h->max_out_tokens >= 1, "max_out_tokens", "must be >= 1");
  r.Get("inference_tp_size", &h->inference_tp_size);
  r.Require(h->inference_tp_size >= 1, "inference_tp_size", "must be >= 1");
  r.Get("tp_gather_partition_size", &h->tp_gather_partition_size);
  r.Require(h->tp_gather_partition_size >= 1, "tp_gather_partition_size", "must be >= 1");
  r.Inert("release_inference_cache", false, "the rollouts' KV caches are kept between iterations");
  r.Get("pin_parameters", &h->pin_parameters);
  r.Inert("enable_cuda_graph", false, "no CUDA graphs are captured");
  r.Finish();
}

void ParseDevice(MapReader& root, DeviceConfig* d) {
  MapReader r = root.Block("device");
  std::string type;
  if (r.Get("type", &type)) {
    if (Lower(type) == "cpu") {
      d->type = DeviceType::kCpu;
    } else if (Lower(type) == "cuda") {
      d->type = DeviceType::kCuda;
    } else {
      r.Fail("type", "must be cpu or cuda, got \"" + type + "\"");
    }
  }
  r.Get("threads", &d->threads);
  r.Require(d->threads >= 0, "threads", "must be >= 0 (0 = the cores given)");
  if (r.Get("cpu_gemm", &d->cpu_gemm))
    r.Require(d->cpu_gemm == "auto" || d->cpu_gemm == "onednn" || d->cpu_gemm == "openblas",
              "cpu_gemm", "must be auto, onednn or openblas");
  if (r.Get("cpu_bf16_matmul", &d->cpu_bf16_matmul))
    r.Require(d->cpu_bf16_matmul == "auto" || d->cpu_bf16_matmul == "bf16" ||
                  d->cpu_bf16_matmul == "fp32",
              "cpu_bf16_matmul", "must be auto, bf16 or fp32");
  r.Finish();
}

bool ParseParallel(MapReader& root, ParallelConfig* p) {
  if (root.IsAuto("parallel")) {
    p->auto_layout = true;
    return false;
  }
  MapReader r = root.Block("parallel");
  int64_t expert = p->expert;
  const bool tensor_given = r.Get("tensor", &p->tensor);
  r.Require(p->tensor >= 1, "tensor", "must be >= 1");
  p->pipeline_given = r.Get("pipeline", &p->pipeline);
  r.Require(p->pipeline >= 1, "pipeline", "must be >= 1");
  r.Get("sequence_parallel", &p->sequence_parallel);
  r.GetAlias({"expert", "ep_size", "expert_parallel_size"}, &expert);
  p->expert = static_cast<int>(expert);
  r.Require(p->expert >= 1, "expert", "must be >= 1");
  r.Get("ulysses", &p->ulysses);
  r.Require(p->ulysses >= 1, "ulysses", "must be >= 1 (DeepSpeed's sequence_parallel_size)");
  r.Get("moe_shared_expert_overlap", &p->moe_shared_expert_overlap);
  r.Finish();
  return tensor_given;
}

// The pipeline block: ours (schedule, virtual_stages, partition_method) and DeepSpeed's
// (stages: the pipeline size, as PipelineModule's num_stages; partition: partition_method).
void ParsePipeline(MapReader& root, PipelineConfig* c, ParallelConfig* parallel,
                   bool parallel_pipeline_given) {
  MapReader r = root.Block("pipeline");
  if (!r.present()) return r.Finish();
  r.Get("schedule", &c->schedule);
  r.Get("virtual_stages", &c->virtual_stages);
  r.Require(c->virtual_stages >= 1, "virtual_stages", "must be >= 1");
  std::string partition;
  if (r.Get("partition", &partition))
    c->partition_method = partition == "best" ? "parameters" : partition;  // DeepSpeed's alias
  r.Get("partition_method", &c->partition_method);
  std::string text;
  if (r.Get("stages", &text) && text != "auto") {  // DeepSpeed's default: the pipeline size
    r.Require(!parallel->auto_layout, "stages",
              "contradicts parallel: auto (the planner picks the pipeline size): remove one");
    char* end = nullptr;
    const long long stages = std::strtoll(text.c_str(), &end, 10);
    r.Require(*end == '\0' && stages >= 1, "stages", "must be \"auto\" or an integer >= 1");
    r.Require(!parallel_pipeline_given || stages == parallel->pipeline, "stages",
              "must equal parallel.pipeline " + std::to_string(parallel->pipeline));
    if (stages >= 1) parallel->pipeline = static_cast<int>(stages);
  }
  for (const char* key : {"activation_checkpoint_interval", "seed_layers", "pipe_partitioned",
                          "grad_partitioned", "use_reentrant"})
    r.Unsupported(key);
  r.Finish();
}

// DeepSpeed's tensor_parallel block (AutoTP): autotp_size is our parallel.tensor.
void ParseTensorParallel(MapReader& root, ParallelConfig* p, bool parallel_tensor_given) {
  MapReader r = root.Block("tensor_parallel");
  int size = 0;
  if (r.Get("autotp_size", &size) && size != 0) {  // 0: DeepSpeed's default, AutoTP off
    r.Require(!p->auto_layout, "autotp_size",
              "contradicts parallel: auto (the planner picks the tensor size): remove one");
    r.Require(size >= 1, "autotp_size", "must be >= 1 (or 0: off)");
    r.Require(!parallel_tensor_given || size == p->tensor, "autotp_size",
              "is " + std::to_string(size) + " and parallel.tensor is " +
                  std::to_string(p->tensor) + ": give one of them");
    if (size >= 1) p->tensor = size;
  }
  for (const char* key :
       {"tp", "tensor_parallel", "tp_grain_size", "partition_config", "keep_module_on_host",
        "tp_overlap_comm", "preset_model", "replace_with_kernel_inject", "kernel_inject", "dtype"})
    r.Unsupported(key);
  r.Finish();
}

}  // namespace ds::config::internal
