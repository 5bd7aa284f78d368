#include "runtime/plan/model_loader.h"

#include <algorithm>
#include <cmath>

#include "runtime/base/status_macros.h"
#include "runtime/graph/graph_io.h"
#include "runtime/graph/model_builder.h"
#include "runtime/graph/validate.h"
#include "runtime/hf/hf_config.h"
#include "runtime/hf/hf_lora.h"

namespace ds::plan {

StatusOr<ModelSpec> HfModelSpec(const config::JobConfig& config) {
  const config::ModelConfig& m = config.model;
  if (config.data.seq_len <= 0)  // ds-chat sets it from its prompt and answer lengths
    return InvalidArgumentError(config.source +
                                ": data.seq_len is required with model.hf (the sequence length "
                                "to train at; the model's config.json gives only the longest it "
                                "allows)");
  DS_ASSIGN_OR_RETURN(ModelSpec s, hf::LoadHfSpec(m.hf));
  s.head = m.head;
  s.pad_mask = m.pad_mask;
  s.reset_attention_mask = config.data.reset_attention_mask;
  s.reset_position_ids = config.data.reset_position_ids;
  if (m.hf_dropout_set) s.dropout = static_cast<float>(m.dropout);
  if (config.data.seq_len > s.max_seq_len && s.arch.position_offset > 0)
    return InvalidArgumentError(config.source + ": data.seq_len " +
                                std::to_string(config.data.seq_len) + " exceeds the " +
                                std::to_string(s.max_seq_len) + " learned positions of " + m.hf);
  // RoPE extends past max_position_embeddings (dynamic RoPE is made for it): the graph takes
  // the job's length.
  s.max_seq_len = std::max(s.max_seq_len, config.data.seq_len);
  return s;
}

StatusOr<ModelSpec> GeneratedModelSpec(const config::JobConfig& config) {
  const config::ModelConfig& m = config.model;
  if (m.family == config::ModelFamily::kNone)
    return InvalidArgumentError(config.source + ": the model section needs `graph` or `family`");
  ModelSpec s;
  s.family = m.family == config::ModelFamily::kGpt2 ? "gpt2" : "llama";
  s.n_layer = m.n_layer;
  s.n_embd = m.n_embd;
  s.n_head = m.n_head;
  s.n_kv_head = m.n_kv_head;
  s.vocab_size = m.vocab_size;
  s.max_seq_len = m.max_seq_len;
  s.ffn_hidden = m.ffn_hidden;
  s.dropout = static_cast<float>(m.dropout);
  s.rope_theta = static_cast<float>(m.rope_theta);
  s.tie_embeddings = m.tie_embeddings ? 1 : 0;
  s.head = m.head;
  s.pad_mask = m.pad_mask;
  s.reset_attention_mask = config.data.reset_attention_mask;
  s.reset_position_ids = config.data.reset_position_ids;
  const config::MoeConfig& moe = m.moe;
  s.moe.num_experts = moe.num_experts;
  s.moe.expert_interval = moe.expert_interval;
  s.moe.top_k = moe.top_k;
  s.moe.capacity_factor = static_cast<float>(moe.capacity_factor);
  s.moe.eval_capacity_factor = static_cast<float>(moe.eval_capacity_factor);
  s.moe.min_capacity = moe.min_capacity;
  s.moe.drop_tokens = moe.drop_tokens;
  s.moe.use_residual = moe.use_residual;
  s.moe.noisy_gate_policy = moe.noisy_gate_policy;
  s.moe.second_expert = moe.top2_2nd_expert_sampling ? "sample" : "argmax";
  s.moe.use_rts = moe.use_rts;
  s.moe.aux_loss_coeff = static_cast<float>(moe.moe_loss_coeff);
  s.moe.expert_ffn_hidden = moe.expert_ffn_hidden;
  return s;
}

LoraOptions LoraOptionsOf(const config::LoraConfig& l) {
  LoraOptions o;
  o.r = l.r;
  // PEFT: alpha / r (alpha / sqrt(r) with use_rslora); DeepSpeed-Chat: lora_scaling / lora_dim.
  o.scale = l.use_rslora ? l.alpha / std::sqrt(double(l.r)) : l.alpha / l.r;
  o.dropout = l.dropout;
  o.bound_from_rank = l.dschat;
  o.freeze_base = l.freeze_base;
  return o;
}

StatusOr<Graph> WithLora(const config::JobConfig& config, const ModelSpec& spec, Graph graph) {
  const config::LoraConfig& l = config.model.lora;
  if (!l.enabled) return graph;
  hf::LoraSelection pick;
  pick.modules = l.target_modules;
  pick.regex = l.target_regex == "all-linear" ? "" : l.target_regex;
  if (l.target_regex == "all-linear") pick.modules = {"all-linear"};
  pick.substring = l.module_name;
  auto targets = hf::FindLoraTargets(spec, graph, pick);
  if (!targets.ok()) return targets.status().WithPrefix(config.source);
  auto g = ApplyLora(graph, *targets, LoraOptionsOf(l));
  if (!g.ok()) return g.status().WithPrefix(config.source);
  DS_RETURN_IF_ERROR(ValidateGraph(*g, config.source + " (model with LoRA adapters)"));
  return g;
}

StatusOr<Graph> LoadModelGraph(const config::JobConfig& config) {
  DS_ASSIGN_OR_RETURN(Graph base, LoadBaseGraph(config));
  if (!config.model.lora.enabled) return base;
  DS_ASSIGN_OR_RETURN(ModelSpec spec,
                      config.model.hf.empty() ? GeneratedModelSpec(config) : HfModelSpec(config));
  return WithLora(config, spec, std::move(base));
}

StatusOr<Graph> LoadBaseGraph(const config::JobConfig& config) {
  const config::ModelConfig& m = config.model;
  if (!m.hf.empty()) {
    DS_ASSIGN_OR_RETURN(ModelSpec s, HfModelSpec(config));
    auto g = BuildModelGraph(s);
    if (!g.ok()) return g.status().WithPrefix(m.hf + "/config.json");
    DS_RETURN_IF_ERROR(ValidateGraph(*g, config.source + " (model " + m.hf + ")"));
    return g;
  }
  if (!m.graph.empty()) {
    if (config.data.reset_attention_mask || config.data.reset_position_ids)
      return InvalidArgumentError(
          config.source +
          ": data.reset_attention_mask / reset_position_ids need a model the "
          "runtime builds (model.family or model.hf), not the graph file " +
          m.graph);
    DS_ASSIGN_OR_RETURN(Graph g, LoadGraph(m.graph));
    DS_RETURN_IF_ERROR(ValidateGraph(g, m.graph));
    return g;
  }
  DS_ASSIGN_OR_RETURN(ModelSpec s, GeneratedModelSpec(config));
  auto g = BuildModelGraph(s);
  if (!g.ok()) return g.status().WithPrefix(config.source);
  DS_RETURN_IF_ERROR(ValidateGraph(*g, config.source + " (model)"));
  return g;
}

}  // namespace ds::plan
