// See hf_config.h. The keys are transformers' GPT2Config and LlamaConfig names.
#include "tools/ds_ckpt/hf_config.h"

#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"
#include "runtime/plan/model_loader.h"

namespace ds::tools {
namespace {

// Dimension 0 of parameter `name` of the graph, or -1.
int64_t Rows(const Graph& g, const std::string& name) {
  const int t = g.FindTensor(name);
  return t < 0 || g.tensors[t].shape.empty() ? -1 : g.tensors[t].shape[0].size;
}

const char* TorchDType(DType d) {
  return d == DType::kBF16 ? "bfloat16" : d == DType::kF16 ? "float16" : "float32";
}

Json Gpt2Config(const config::ModelConfig& m, const Graph& g) {
  Json c = Json::Object();
  c.Set("architectures", Json::Array({Json::String("GPT2LMHeadModel")}));
  c.Set("model_type", Json::String("gpt2"));
  c.Set("vocab_size", Json::Int(m.vocab_size));
  c.Set("n_positions", Json::Int(m.max_seq_len));
  c.Set("n_ctx", Json::Int(m.max_seq_len));
  c.Set("n_embd", Json::Int(m.n_embd));
  c.Set("n_layer", Json::Int(m.n_layer));
  c.Set("n_head", Json::Int(m.n_head));
  c.Set("n_inner", Json::Int(Rows(g, "h.0.mlp.fc.weight")));
  c.Set("activation_function", Json::String("gelu_new"));
  c.Set("layer_norm_epsilon", Json::Double(1e-5));
  for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    c.Set(p, Json::Double(m.dropout));
  c.Set("tie_word_embeddings", Json::Bool(true));
  return c;
}

Json LlamaConfig(const config::ModelConfig& m, const Graph& g) {
  Json c = Json::Object();
  c.Set("architectures", Json::Array({Json::String("LlamaForCausalLM")}));
  c.Set("model_type", Json::String("llama"));
  c.Set("vocab_size", Json::Int(m.vocab_size));
  c.Set("hidden_size", Json::Int(m.n_embd));
  c.Set("intermediate_size", Json::Int(Rows(g, "layers.0.mlp.gate_proj.weight")));
  c.Set("num_hidden_layers", Json::Int(m.n_layer));
  c.Set("num_attention_heads", Json::Int(m.n_head));
  c.Set("num_key_value_heads", Json::Int(m.n_kv_head > 0 ? m.n_kv_head : m.n_head));
  c.Set("max_position_embeddings", Json::Int(m.max_seq_len));
  c.Set("rms_norm_eps", Json::Double(1e-5));
  c.Set("rope_theta", Json::Double(m.rope_theta));
  c.Set("hidden_act", Json::String("silu"));
  c.Set("attention_bias", Json::Bool(false));
  c.Set("mlp_bias", Json::Bool(false));
  c.Set("tie_word_embeddings", Json::Bool(g.FindTensor("lm_head.weight") < 0));
  return c;
}

}  // namespace

StatusOr<std::string> HfConfigJson(const config::JobConfig& job, DType dtype) {
  const config::ModelConfig& m = job.model;
  const std::string where = job.source + ": config.json for the export: ";
  if (m.family == config::ModelFamily::kNone)
    return InvalidArgumentError(where +
                                "model.family must be gpt2 or llama (a graph file "
                                "carries no Hugging Face config)");
  if (m.moe.num_experts > 0)
    return InvalidArgumentError(where + "a mixture-of-experts model has no config.json here yet");
  if (m.head != "lm")
    return InvalidArgumentError(where + "model.head " + m.head +
                                " has no transformers class; only \"lm\" models export one");
  DS_ASSIGN_OR_RETURN(Graph g, plan::LoadModelGraph(job));
  Json c = m.family == config::ModelFamily::kGpt2 ? Gpt2Config(m, g) : LlamaConfig(m, g);
  c.Set("torch_dtype", Json::String(TorchDType(dtype)));
  return c.Dump(2) + "\n";
}

}  // namespace ds::tools
