// Llama's graph and the families built on it (model_builder.h IsLlamaLike), with ArchSpec's
// options: per block
//   h = rmsnorm(x); qkv = linear(h) (+ bias: Qwen 2); [head_rmsnorm (Qwen 3)]; rope; attention
//   (window, soft cap, scale: Mistral, Gemma 2); o_proj; [rmsnorm (Gemma 2)]; x += that
//   h = rmsnorm(x); gate, up; act(gate) * up (silu, or GELU-tanh for Gemma); down;
//   [rmsnorm (Gemma 2)]; x += that
// and embeddings scaled by sqrt(hidden) (Gemma), norms of (1 + w) (Gemma), logits capped
// (Gemma 2). Parameter names follow transformers' under "layers.<i>." with the q/k/v
// projections fused into attn.qkv (q heads, k heads, v heads), as runtime/hf maps them.
#include <string>
#include <vector>

#include "runtime/graph/builder_parts.h"
#include "runtime/graph/moe_builder.h"

namespace ds::graph_internal {
namespace {

int64_t HeadDim(const ModelSpec& s) {
  return s.arch.head_dim > 0 ? s.arch.head_dim : s.n_embd / s.n_head;
}

// The rope op's attributes: theta and, only where they differ from plain RoPE, the variant's.
kernels::Attrs RopeAttrs(const ModelSpec& s, const kernels::Attrs& heads) {
  const RopeSpec& r = s.arch.rope;
  kernels::Attrs a = heads;
  a.SetFloat("theta", s.rope_theta);
  const int64_t rotary = static_cast<int64_t>(HeadDim(s) * r.partial);
  if (rotary != HeadDim(s)) a.SetInt("rotary_dim", rotary);
  if (r.type == "default") return a;
  a.SetString("rope_type", r.type);
  a.SetFloat("factor", r.factor);
  if (r.type == "dynamic")
    a.SetInt("max_positions", r.max_positions > 0 ? r.max_positions : s.max_seq_len);
  if (r.type == "llama3" || r.type == "yarn") a.SetInt("original_max", r.original_max);
  if (r.type == "llama3") {
    a.SetFloat("low_freq_factor", r.low_freq_factor);
    a.SetFloat("high_freq_factor", r.high_freq_factor);
  }
  if (r.type == "yarn") {
    a.SetFloat("beta_fast", r.beta_fast);
    a.SetFloat("beta_slow", r.beta_slow);
    a.SetFloat("attention_factor", r.attention_factor);
    a.SetInt("truncate", r.truncate ? 1 : 0);
  }
  return a;
}

// Block i's attention attributes: the heads, and the scale, soft cap and window it has.
kernels::Attrs AttentionAttrs(const ModelSpec& s, const kernels::Attrs& heads, int i) {
  const ArchSpec& a = s.arch;
  kernels::Attrs attrs = heads;
  if (a.attn_scale > 0) attrs.SetFloat("scale", a.attn_scale);
  if (a.attn_softcap > 0) attrs.SetFloat("softcap", a.attn_softcap);
  bool sliding = a.sliding_window > 0 && a.sliding_layers.empty();
  for (int l : a.sliding_layers) sliding = sliding || (l == i && a.sliding_window > 0);
  if (sliding) attrs.SetInt("window", a.sliding_window);
  return attrs;
}

// The norms' attributes: eps and Gemma's unit offset.
kernels::Attrs NormAttrs(const ModelSpec& s) {
  kernels::Attrs a = Eps(s.norm_eps > 0 ? s.norm_eps : 1e-5f);
  if (s.arch.norm_unit_offset) a.SetInt("unit_offset", 1);
  return a;
}

// A norm weight: ones, or zeros for Gemma's (1 + w) (the same function at init).
int NormWeight(Builder& b, const ModelSpec& s, const std::string& name, int64_t c) {
  return b.Param(name, {c}, s.arch.norm_unit_offset ? Zeros() : Ones(), ShardKind::kReplicated);
}

// The dense gated MLP: down(act(gate(h)) * up(h)), biases with mlp_bias.
int GatedMlp(Builder& b, const ModelSpec& s, const std::string& p, int h, int i, int64_t F) {
  const int64_t C = s.n_embd;
  const bool bias = s.arch.mlp_bias;
  int gw = b.Param(p + "mlp.gate_proj.weight", {F, C}, Normal(s.init_std), ShardKind::kColumn);
  int uw = b.Param(p + "mlp.up_proj.weight", {F, C}, Normal(s.init_std), ShardKind::kColumn);
  int dw = b.Param(p + "mlp.down_proj.weight", {C, F}, Normal(s.init_std), ShardKind::kRow);
  std::vector<int> gate_in = {h, gw}, up_in = {h, uw}, down_in = {-1, dw};
  if (bias) {
    gate_in.push_back(b.Param(p + "mlp.gate_proj.bias", {F}, Zeros(), ShardKind::kColumn));
    up_in.push_back(b.Param(p + "mlp.up_proj.bias", {F}, Zeros(), ShardKind::kColumn));
    down_in.push_back(b.Param(p + "mlp.down_proj.bias", {C}, Zeros(), ShardKind::kReplicated));
  }
  int gate = b.Node("linear", p + "mlp.gate", gate_in, F, i);
  int up = b.Node("linear", p + "mlp.up", up_in, F, i);
  const bool gelu = s.arch.act == "gelu_tanh";
  gate = b.Node(gelu ? "gelu" : "silu", p + (gelu ? "mlp.gelu" : "mlp.silu"), {gate}, F, i);
  down_in[0] = b.Node("mul", p + (gelu ? "mlp.geglu" : "mlp.swiglu"), {gate, up}, F, i);
  return b.Node("linear", p + "mlp.down", down_in, C, i);
}

// One block's attention parameters, made before its nodes (the parameter order of Llama's
// checkpoints: input norm, qkv, o_proj, pre-MLP norm, the MLP).
struct AttentionParams {
  int qkv_w = -1, qkv_b = -1, o_w = -1, o_b = -1, q_norm = -1, k_norm = -1;
};

struct Block {
  const ModelSpec& s;
  Builder& b;
  kernels::Attrs heads, rope, norm;
  TokenInputs tok;  // per-token inputs (pads, document starts / positions)
  int64_t D, qkv_rows, F;

  AttentionParams MakeAttentionParams(const std::string& p) {
    const int64_t C = s.n_embd, H = s.n_head;
    const ArchSpec& a = s.arch;
    AttentionParams w;
    w.qkv_w = b.Param(p + "attn.qkv.weight", {qkv_rows, C}, Normal(s.init_std), ShardKind::kColumn);
    if (a.qkv_bias) w.qkv_b = b.Param(p + "attn.qkv.bias", {qkv_rows}, Zeros(), ShardKind::kColumn);
    w.o_w = b.Param(p + "attn.o_proj.weight", {C, H * D}, Normal(s.init_std), ShardKind::kRow);
    if (a.o_bias) w.o_b = b.Param(p + "attn.o_proj.bias", {C}, Zeros(), ShardKind::kReplicated);
    if (a.qk_norm) {
      w.q_norm = b.Param(p + "attn.q_norm.weight", {D}, Ones(), ShardKind::kReplicated);
      w.k_norm = b.Param(p + "attn.k_norm.weight", {D}, Ones(), ShardKind::kReplicated);
    }
    return w;
  }

  // Attention of block i on the normed h: the output projection's result.
  int Attention(const std::string& p, const AttentionParams& w, int h, int i) {
    std::vector<int> qkv_in = {h, w.qkv_w}, o_in = {-1, w.o_w};
    if (w.qkv_b >= 0) qkv_in.push_back(w.qkv_b);
    if (w.o_b >= 0) o_in.push_back(w.o_b);
    h = b.Node("linear", p + "attn.qkv", qkv_in, qkv_rows, i);
    if (w.q_norm >= 0) {
      kernels::Attrs qk = heads;
      qk.SetFloat("eps", s.norm_eps > 0 ? s.norm_eps : 1e-5f);
      h = b.Node("head_rmsnorm", p + "attn.qk_norm", {h, w.q_norm, w.k_norm}, qkv_rows, i, qk);
    }
    h = b.Node("rope", p + "attn.rope", WithPads({h}, tok.positions), qkv_rows, i, rope);
    h = b.Node("attention", p + "attn.att", WithPads({h}, tok.attention), s.n_head * D, i,
               AttentionAttrs(s, heads, i));
    o_in[0] = h;
    return b.Node("linear", p + "attn.o_proj", o_in, s.n_embd, i);
  }

  // Gemma 2's norm of a sub-layer's output (post_attention / post_feedforward).
  int SandwichNorm(const std::string& name, int h, int i) {
    if (!s.arch.sandwich_norms) return h;
    return b.Node("rmsnorm", name, {h, NormWeight(b, s, name + ".weight", s.n_embd)}, s.n_embd, i,
                  norm);
  }

  int Run(int x, int i, std::vector<int>* aux) {
    const int64_t C = s.n_embd;
    const std::string p = "layers." + std::to_string(i) + ".";
    const std::string pre_mlp =
        p + (s.arch.sandwich_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm");
    int n1w = NormWeight(b, s, p + "input_layernorm.weight", C);
    const AttentionParams w = MakeAttentionParams(p);
    int n2w = NormWeight(b, s, pre_mlp + ".weight", C);
    int h = b.Node("rmsnorm", p + "input_layernorm", {x, n1w}, C, i, norm);
    h = SandwichNorm(p + "post_attention_layernorm", Attention(p, w, h, i), i);
    x = b.Node("add", p + "res_1", {x, h}, C, i);
    h = b.Node("rmsnorm", pre_mlp, {x, n2w}, C, i, norm);
    h = IsMoeBlock(s.moe, i) ? LlamaMoeMlp(b, s, p, h, i, F, aux) : GatedMlp(b, s, p, h, i, F);
    h = SandwichNorm(p + "post_feedforward_layernorm", h, i);
    return b.Node("add", p + "res_2", {x, h}, C, i);
  }
};

}  // namespace

void BuildLlama(const ModelSpec& s, Graph* g) {
  Builder b(g);
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer;
  const int64_t H = s.n_head, KV = s.n_kv_head > 0 ? s.n_kv_head : s.n_head, D = HeadDim(s);
  int64_t F = s.ffn_hidden;
  if (F <= 0) F = (8 * C / 3 + 63) / 64 * 64;
  int ids = b.Data("ids", TensorRole::kInput);
  int targets = b.Data("targets", TensorRole::kTarget);
  int emb = b.Param("embed_tokens", {V, C}, Normal(s.init_std), ShardKind::kVocab);
  const TokenInputs tok = PerTokenInputs(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, emb}, C, -1);
  if (s.arch.embed_scale > 0) {
    kernels::Attrs scale;
    scale.SetFloat("factor", s.arch.embed_scale);
    x = b.Node("scale", "tok_emb.scaled", {x}, C, -1, scale);
  }
  kernels::Attrs heads;
  heads.SetInt("n_head", H);
  heads.SetInt("n_kv_head", KV);
  Block block{s, b, heads, RopeAttrs(s, heads), NormAttrs(s), tok, D, (H + 2 * KV) * D, F};
  std::vector<int> aux;  // the MoE layers' aux losses
  for (int i = 0; i < L; ++i) x = block.Run(x, i, &aux);
  int nw = NormWeight(b, s, "norm.weight", C);
  x = b.Node("rmsnorm", "norm", {x, nw}, C, L, block.norm);
  g->loss = OutputHead(b, s, x, C, emb, s.tie_embeddings == 1, targets, aux);
}

}  // namespace ds::graph_internal
