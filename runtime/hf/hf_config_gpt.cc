// The LayerNorm families' config.json (models-and-data.md 3.4, 3.5): gpt2, opt, gpt_neox.
#include "runtime/base/status_macros.h"
#include "runtime/hf/hf_config_reader.h"

namespace ds::hf::internal {
namespace {

constexpr char kNoDropout[] = "the runtime has no dropout there; set it to 0";

}  // namespace

StatusOr<ModelSpec> Gpt2Spec(const Config& c) {
  ModelSpec s;
  s.family = "gpt2";
  DS_ASSIGN_OR_RETURN(const int64_t layers, c.Int("n_layer"));
  DS_ASSIGN_OR_RETURN(const int64_t width, c.Int("n_embd"));
  DS_ASSIGN_OR_RETURN(const int64_t heads, c.Int("n_head"));
  DS_ASSIGN_OR_RETURN(const int64_t vocab, c.Int("vocab_size"));
  DS_ASSIGN_OR_RETURN(const int64_t positions, c.Int("n_positions"));
  DS_ASSIGN_OR_RETURN(const int64_t inner, c.IntOr("n_inner", 4 * width));
  DS_ASSIGN_OR_RETURN(const double eps, c.DoubleOr("layer_norm_epsilon", 1e-5));
  s.n_layer = static_cast<int>(layers);
  s.n_embd = static_cast<int>(width);
  s.n_head = static_cast<int>(heads);
  s.vocab_size = static_cast<int>(vocab);
  s.max_seq_len = static_cast<int>(positions);
  s.ffn_hidden = static_cast<int>(inner);
  s.norm_eps = static_cast<float>(eps);
  DS_ASSIGN_OR_RETURN(const std::string act, c.StringOr("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    return c.Bad("activation_function", "is \"" + act + "\"; the graph computes gelu_new (tanh)");
  DS_ASSIGN_OR_RETURN(bool inverse, c.BoolOr("scale_attn_by_inverse_layer_idx", false));
  DS_ASSIGN_OR_RETURN(bool upcast, c.BoolOr("reorder_and_upcast_attn", false));
  if (inverse || upcast)
    return c.Bad("scale_attn_by_inverse_layer_idx", "or reorder_and_upcast_attn is not supported");
  return s;
}

StatusOr<ModelSpec> OptSpec(const Config& c) {
  ModelSpec s;
  s.family = "opt";
  DS_RETURN_IF_ERROR(ReadShape(c, "ffn_dim", &s));
  DS_ASSIGN_OR_RETURN(const int64_t proj, c.IntOr("word_embed_proj_dim", s.n_embd));
  DS_ASSIGN_OR_RETURN(const double dropout, c.DoubleOr("dropout", 0.1));
  DS_ASSIGN_OR_RETURN(const bool pre, c.BoolOr("do_layer_norm_before", true));
  DS_ASSIGN_OR_RETURN(const bool tied, c.BoolOr("tie_word_embeddings", true));
  DS_ASSIGN_OR_RETURN(const std::string act, c.StringOr("activation_function", "relu"));
  DS_ASSIGN_OR_RETURN(const double init, c.DoubleOr("init_std", 0.02));
  s.dropout = static_cast<float>(dropout);
  s.init_std = static_cast<float>(init);
  s.tie_embeddings = tied ? 1 : 0;
  s.norm_eps = 1e-5f;  // torch's LayerNorm default: OPT has no eps key
  s.arch.pre_norm = pre;
  s.arch.position_offset = 2;
  if (proj != s.n_embd) s.arch.embed_proj_dim = static_cast<int>(proj);
  if (act != "relu")
    return c.Bad("activation_function", "is \"" + act + "\"; OPT's graph has relu");
  DS_RETURN_IF_ERROR(c.Require("enable_bias", 1, "OPT's graph has biases on every linear"));
  DS_RETURN_IF_ERROR(c.Require("layer_norm_elementwise_affine", 1, "its norms are affine here"));
  DS_RETURN_IF_ERROR(c.Require("_remove_final_layer_norm", 0, "the final norm is kept here"));
  DS_RETURN_IF_ERROR(c.Require("attention_dropout", 0, kNoDropout));
  DS_RETURN_IF_ERROR(c.Require("activation_dropout", 0, kNoDropout));
  DS_RETURN_IF_ERROR(c.Require("layerdrop", 0, "the runtime drops no layers"));
  return s;
}

StatusOr<ModelSpec> GptNeoxSpec(const Config& c) {
  ModelSpec s;
  s.family = "gpt_neox";
  DS_RETURN_IF_ERROR(ReadShape(c, "intermediate_size", &s));
  DS_ASSIGN_OR_RETURN(const double eps, c.DoubleOr("layer_norm_eps", 1e-5));
  DS_ASSIGN_OR_RETURN(const double init, c.DoubleOr("initializer_range", 0.02));
  DS_ASSIGN_OR_RETURN(const bool parallel, c.BoolOr("use_parallel_residual", true));
  DS_ASSIGN_OR_RETURN(const bool bias, c.BoolOr("attention_bias", true));
  DS_ASSIGN_OR_RETURN(const bool tied, c.BoolOr("tie_word_embeddings", false));
  DS_ASSIGN_OR_RETURN(const std::string act, c.StringOr("hidden_act", "gelu"));
  s.norm_eps = static_cast<float>(eps);
  s.init_std = static_cast<float>(init);
  s.tie_embeddings = tied ? 1 : 0;
  s.arch.parallel_residual = parallel;
  s.arch.attn_bias = bias;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    s.arch.act = "gelu_tanh";
  else if (act != "gelu")
    return c.Bad("hidden_act", "is \"" + act + "\"; GPT-NeoX's graph has gelu or its tanh form");
  // The legacy keys (rotary_pct, rotary_emb_base) give the defaults the RoPE dict overrides.
  DS_ASSIGN_OR_RETURN(s.arch.rope.partial, c.DoubleOr("rotary_pct", 0.25));
  DS_RETURN_IF_ERROR(ReadRope(c, &s));
  if (c.Has("rotary_emb_base") && !c.Has("rope_theta")) {
    const Json* d = c.Find("rope_parameters");
    if (!d || !d->Find("rope_theta")) {
      DS_ASSIGN_OR_RETURN(double base, c.DoubleOr("rotary_emb_base", 10000));
      s.rope_theta = static_cast<float>(base);
    }
  }
  if (s.arch.rope.type != "default")
    return c.Bad("rope_parameters.rope_type",
                 "is \"" + s.arch.rope.type + "\"; GPT-NeoX's graph has plain RoPE");
  DS_RETURN_IF_ERROR(c.Require("hidden_dropout", 0, kNoDropout));
  DS_RETURN_IF_ERROR(c.Require("attention_dropout", 0, kNoDropout));
  return s;
}

}  // namespace ds::hf::internal
