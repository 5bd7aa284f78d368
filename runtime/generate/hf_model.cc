#include "runtime/generate/hf_model.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_names.h"
#include "runtime/ckpt/hf_weights.h"
#include "runtime/ckpt/json.h"
#include "runtime/ckpt/safetensors.h"

namespace ds::generate {
namespace {

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Config {
 public:
  Config(const ckpt::Json& doc, const std::string& where) : doc_(doc), where_(where) {}
  StatusOr<int64_t> Int(const char* key) const {
    const ckpt::Json* v = doc_.Find(key);
    if (!v || !v->is_number())
      return InvalidArgumentError(where_ + ": \"" + key + "\" is missing or not a number");
    return v->as_int();
  }
  int64_t IntOr(const char* key, int64_t dflt) const {
    const ckpt::Json* v = doc_.Find(key);
    return v && v->is_number() ? v->as_int() : dflt;
  }
  double DoubleOr(const char* key, double dflt) const {
    const ckpt::Json* v = doc_.Find(key);
    return v && v->is_number() ? v->as_double() : dflt;
  }
  std::string StringOr(const char* key, const std::string& dflt) const {
    const ckpt::Json* v = doc_.Find(key);
    return v && v->is_string() ? v->as_string() : dflt;
  }
  bool TrueOr(const char* key, bool dflt) const {
    const ckpt::Json* v = doc_.Find(key);
    return v && v->is_bool() ? v->as_bool() : dflt;
  }
  bool Null(const char* key) const {
    const ckpt::Json* v = doc_.Find(key);
    return !v || v->is_null();
  }
  Status Bad(const std::string& key, const std::string& what) const {
    return InvalidArgumentError(where_ + ": \"" + key + "\" " + what);
  }

 private:
  const ckpt::Json& doc_;
  const std::string& where_;
};

StatusOr<ModelSpec> Gpt2Spec(const Config& c) {
  ModelSpec s;
  s.family = "gpt2";
  DS_ASSIGN_OR_RETURN(const int64_t layers, c.Int("n_layer"));
  DS_ASSIGN_OR_RETURN(const int64_t width, c.Int("n_embd"));
  DS_ASSIGN_OR_RETURN(const int64_t heads, c.Int("n_head"));
  DS_ASSIGN_OR_RETURN(const int64_t vocab, c.Int("vocab_size"));
  DS_ASSIGN_OR_RETURN(const int64_t positions, c.Int("n_positions"));
  s.n_layer = static_cast<int>(layers);
  s.n_embd = static_cast<int>(width);
  s.n_head = static_cast<int>(heads);
  s.vocab_size = static_cast<int>(vocab);
  s.max_seq_len = static_cast<int>(positions);
  s.ffn_hidden = static_cast<int>(c.IntOr("n_inner", 4 * width));
  s.norm_eps = static_cast<float>(c.DoubleOr("layer_norm_epsilon", 1e-5));
  const std::string act = c.StringOr("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    return c.Bad("activation_function", "is \"" + act + "\"; the graph computes gelu_new (tanh)");
  if (c.TrueOr("scale_attn_by_inverse_layer_idx", false) ||
      c.TrueOr("reorder_and_upcast_attn", false))
    return c.Bad("scale_attn_by_inverse_layer_idx", "or reorder_and_upcast_attn is not supported");
  return s;
}

StatusOr<ModelSpec> LlamaSpec(const Config& c) {
  ModelSpec s;
  s.family = "llama";
  DS_ASSIGN_OR_RETURN(const int64_t layers, c.Int("num_hidden_layers"));
  DS_ASSIGN_OR_RETURN(const int64_t width, c.Int("hidden_size"));
  DS_ASSIGN_OR_RETURN(const int64_t heads, c.Int("num_attention_heads"));
  DS_ASSIGN_OR_RETURN(const int64_t vocab, c.Int("vocab_size"));
  DS_ASSIGN_OR_RETURN(const int64_t ffn, c.Int("intermediate_size"));
  s.n_layer = static_cast<int>(layers);
  s.n_embd = static_cast<int>(width);
  s.n_head = static_cast<int>(heads);
  s.n_kv_head = static_cast<int>(c.IntOr("num_key_value_heads", heads));
  s.vocab_size = static_cast<int>(vocab);
  s.ffn_hidden = static_cast<int>(ffn);
  s.max_seq_len = static_cast<int>(c.IntOr("max_position_embeddings", 2048));
  s.norm_eps = static_cast<float>(c.DoubleOr("rms_norm_eps", 1e-6));
  s.rope_theta = static_cast<float>(c.DoubleOr("rope_theta", 10000.0));
  s.tie_embeddings = c.TrueOr("tie_word_embeddings", false) ? 1 : 0;
  if (!c.Null("rope_scaling")) return c.Bad("rope_scaling", "is not supported yet");
  if (c.TrueOr("attention_bias", false) || c.TrueOr("mlp_bias", false))
    return c.Bad("attention_bias", "or mlp_bias: Llama's linears have no biases here");
  if (c.StringOr("hidden_act", "silu") != "silu") return c.Bad("hidden_act", "must be silu");
  return s;
}

}  // namespace

StatusOr<ModelSpec> SpecFromHfConfig(const std::string& json, const std::string& where) {
  auto doc = ckpt::ParseJson(json);
  if (!doc.ok()) return doc.status().WithPrefix(where);
  const Config c(*doc, where);
  const std::string type = c.StringOr("model_type", "");
  if (type == "gpt2") return Gpt2Spec(c);
  if (type == "llama") return LlamaSpec(c);
  return c.Bad("model_type", "is \"" + type + "\"; ds-runtime reads gpt2 and llama");
}

StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  DS_ASSIGN_OR_RETURN(std::string text, ReadText(config_path));
  HfModel m;
  DS_ASSIGN_OR_RETURN(m.spec, SpecFromHfConfig(text, config_path));
  DS_ASSIGN_OR_RETURN(m.graph, BuildModelGraph(m.spec));
  // model.safetensors, or the shards of model.safetensors.index.json, mapped (no copy).
  DS_ASSIGN_OR_RETURN(ckpt::HfWeights files, ckpt::HfWeights::Open(dir));
  const std::string& weights = files.label();
  const std::vector<ckpt::NamedTensor>& hf = files.tensors();
  ckpt::HfOptions o;
  o.n_head = m.spec.n_head;
  o.n_kv_head = m.spec.n_kv_head > 0 ? m.spec.n_kv_head : m.spec.n_head;
  o.tied = m.spec.family == "llama" && m.spec.tie_embeddings == 1;
  DS_ASSIGN_OR_RETURN(ckpt::ModelFamily family, ckpt::ParseModelFamily(m.spec.family));
  DS_ASSIGN_OR_RETURN(std::vector<ckpt::OwnedNamedTensor> ours,
                      ckpt::HfToOurs(family, hf, weights, o));
  m.params = std::make_unique<zero::ParamStore>(m.graph, DType::kF32);
  std::vector<float> full(m.params->total_elements(), 0.0f);
  for (const ckpt::OwnedNamedTensor& t : ours) {
    const zero::ParamSlot* slot = m.params->Find(t.name);
    if (!slot || t.tensor.view().numel() != slot->numel)
      return DataLossError(weights + ": \"" + t.name + "\" does not fit the model of " +
                           config_path);
    std::vector<float> values(slot->numel);
    for (int64_t i = 0; i < slot->numel; ++i)
      values[i] = LoadFloat(t.tensor.view().data(), t.tensor.view().dtype(), i);
    std::copy(values.begin(), values.end(), full.begin() + slot->offset);
  }
  if (ours.size() != m.params->slots().size())
    return DataLossError(weights + ": " + std::to_string(ours.size()) + " tensors for the " +
                         std::to_string(m.params->slots().size()) + " parameters of " +
                         config_path);
  m.params->SetFromFull(full.data());
  return m;
}

}  // namespace ds::generate
