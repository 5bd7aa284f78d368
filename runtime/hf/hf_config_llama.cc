// The Llama-like families' config.json (models-and-data.md 1, 3.1-3.3, 3.6-3.8): llama,
// mistral, qwen2, qwen3, phi3, gemma, gemma2 on Llama's graph with ArchSpec's options.
#include <cmath>

#include "runtime/base/status_macros.h"
#include "runtime/hf/hf_config_reader.h"

namespace ds::hf::internal {
namespace {

constexpr char kNoDropout[] = "the runtime has no dropout there; set it to 0";

// The shape keys of a Llama-like config: the shared ones, key / value heads and head_dim.
Status ReadLlamaShape(const Config& c, ModelSpec* s) {
  DS_RETURN_IF_ERROR(ReadShape(c, "intermediate_size", s));
  DS_ASSIGN_OR_RETURN(const int64_t kv, c.IntOr("num_key_value_heads", s->n_head));
  DS_ASSIGN_OR_RETURN(const int64_t head_dim, c.IntOr("head_dim", s->n_embd / s->n_head));
  s->n_kv_head = static_cast<int>(kv);
  if (head_dim <= 0) return c.Bad("head_dim", "must be positive");
  if (head_dim != s->n_embd / s->n_head || s->n_embd % s->n_head)
    s->arch.head_dim = static_cast<int>(head_dim);
  return OkStatus();
}

// hidden_act (hidden_activation for Gemma 2): silu, or GELU's tanh form for Gemma.
Status ReadActivation(const Config& c, const std::string& type, ModelSpec* s) {
  const bool gemma = type == "gemma" || type == "gemma2";
  const char* key = type == "gemma2" ? "hidden_activation" : "hidden_act";
  DS_ASSIGN_OR_RETURN(std::string act, c.StringOr(key, gemma ? "gelu_pytorch_tanh" : "silu"));
  if (gemma && (act == "gelu" || act == "gelu_pytorch_tanh" || act == "gelu_new")) {
    s->arch.act = "gelu_tanh";  // transformers runs Gemma's "gelu" as the tanh form too
    return OkStatus();
  }
  if (act != "silu")
    return c.Bad(key, "is \"" + act + "\"; the " + type + " graph computes " +
                          (gemma ? "gelu_pytorch_tanh" : "silu"));
  return OkStatus();
}

// The biases: Llama's attention_bias / mlp_bias, Qwen 2's q/k/v biases, Qwen 3's and Gemma's
// attention_bias; the others have none.
Status ReadBiases(const Config& c, const std::string& type, ModelSpec* s) {
  DS_ASSIGN_OR_RETURN(bool attention_bias, c.BoolOr("attention_bias", false));
  DS_ASSIGN_OR_RETURN(bool mlp_bias, c.BoolOr("mlp_bias", false));
  if (type == "qwen2") {
    s->arch.qkv_bias = true;
    return OkStatus();
  }
  const bool has_key = type == "llama" || type == "qwen3" || type == "gemma" || type == "gemma2";
  if (attention_bias && !has_key)
    return c.Bad("attention_bias", "is true; " + type + " has no attention biases");
  if (mlp_bias && type != "llama") return c.Bad("mlp_bias", "is true; " + type + " has none");
  s->arch.qkv_bias = s->arch.o_bias = attention_bias;
  s->arch.mlp_bias = mlp_bias;
  return OkStatus();
}

// Sliding windows: Mistral's and Phi 3's on every layer when set, Qwen's behind
// use_sliding_window (layer_types, or the layers from max_window_layers up), Gemma 2's on the
// layers layer_types names (even layers by default).
Status ReadSliding(const Config& c, const std::string& type, ModelSpec* s) {
  DS_ASSIGN_OR_RETURN(int64_t window, c.IntOr("sliding_window", 0));
  if (type == "llama" || type == "gemma") return OkStatus();
  if (type == "mistral" || type == "phi3") {
    s->arch.sliding_window = static_cast<int>(window);
    return OkStatus();
  }
  if (type == "gemma2") {
    s->arch.sliding_window = static_cast<int>(window);
    return ReadLayerTypes(c, /*every_other=*/true, s);
  }
  DS_ASSIGN_OR_RETURN(bool use, c.BoolOr("use_sliding_window", false));  // qwen2, qwen3
  if (!use) return OkStatus();
  if (window <= 0) return c.Bad("sliding_window", "must be set with use_sliding_window");
  s->arch.sliding_window = static_cast<int>(window);
  if (c.Has("layer_types")) return ReadLayerTypes(c, false, s);
  DS_ASSIGN_OR_RETURN(int64_t from, c.IntOr("max_window_layers", 28));
  for (int i = static_cast<int>(from); i < s->n_layer; ++i) s->arch.sliding_layers.push_back(i);
  if (s->arch.sliding_layers.empty()) s->arch.sliding_window = 0;  // no layer slides
  return OkStatus();
}

Status ReadGemma2(const Config& c, ModelSpec* s) {
  DS_ASSIGN_OR_RETURN(double scalar, c.DoubleOr("query_pre_attn_scalar", 256));
  DS_ASSIGN_OR_RETURN(double attn_cap, c.DoubleOr("attn_logit_softcapping", 0));
  DS_ASSIGN_OR_RETURN(double final_cap, c.DoubleOr("final_logit_softcapping", 0));
  if (!(scalar > 0)) return c.Bad("query_pre_attn_scalar", "must be > 0");
  if (attn_cap < 0 || final_cap < 0) return c.Bad("attn_logit_softcapping", "must be >= 0");
  s->arch.attn_scale = static_cast<float>(std::pow(scalar, -0.5));
  s->arch.attn_softcap = static_cast<float>(attn_cap);
  s->arch.final_softcap = static_cast<float>(final_cap);
  s->arch.sandwich_norms = true;
  return OkStatus();
}

}  // namespace

StatusOr<ModelSpec> LlamaLikeSpec(const Config& c, const std::string& type) {
  ModelSpec s;
  s.family = type;
  DS_RETURN_IF_ERROR(ReadLlamaShape(c, &s));
  const bool gemma = type == "gemma" || type == "gemma2";
  DS_ASSIGN_OR_RETURN(double eps, c.DoubleOr("rms_norm_eps", type == "phi3" ? 1e-5 : 1e-6));
  DS_ASSIGN_OR_RETURN(double init, c.DoubleOr("initializer_range", 0.02));
  DS_ASSIGN_OR_RETURN(bool tied, c.BoolOr("tie_word_embeddings", gemma));
  s.norm_eps = static_cast<float>(eps);
  s.init_std = static_cast<float>(init);
  s.tie_embeddings = tied ? 1 : 0;
  DS_RETURN_IF_ERROR(ReadRope(c, &s));
  DS_RETURN_IF_ERROR(ReadActivation(c, type, &s));
  DS_RETURN_IF_ERROR(ReadBiases(c, type, &s));
  DS_RETURN_IF_ERROR(ReadSliding(c, type, &s));
  DS_RETURN_IF_ERROR(c.Require("attention_dropout", 0, kNoDropout));
  DS_RETURN_IF_ERROR(c.Require("resid_pdrop", 0, kNoDropout));  // phi3
  DS_RETURN_IF_ERROR(c.Require("embd_pdrop", 0, kNoDropout));
  if (type == "qwen3") s.arch.qk_norm = true;
  if (gemma) {
    s.arch.norm_unit_offset = true;
    s.arch.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(s.n_embd)));
  }
  if (type == "gemma2") DS_RETURN_IF_ERROR(ReadGemma2(c, &s));
  return s;
}

}  // namespace ds::hf::internal
