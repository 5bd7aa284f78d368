// The LayerNorm families with biases beside GPT-2 (model_builder.cc): OPT and GPT-NeoX
// (models-and-data.md 3.4, 3.5). Parameter names are transformers' without the
// "model.decoder." / "gpt_neox." prefixes, the q/k/v projections fused into one
// [q heads, k heads, v heads] linear as runtime/hf maps them.
//   OPT:      x = embed(ids) [project_in] + pos[p + 2]; pre-LN blocks
//             x += out_proj(attn(ln(x))); x += fc2(relu(fc1(ln(x)))), a final norm; or post-LN
//             x = ln(x + attn(x)); x = ln(x + mlp(x)) and none; [project_out]; logits over the
//             (tied) embedding
//   GPT-NeoX: partial RoPE; parallel residual x + attn(ln1(x)) + mlp(ln2(x)) or sequential;
//             the MLP dense_4h_to_h(gelu(dense_h_to_4h)); final norm; an untied head
#include <string>
#include <vector>

#include "runtime/graph/builder_parts.h"

namespace ds::graph_internal {
namespace {

int LayerNormNode(Builder& b, const std::string& name, int x, int64_t c, int block, float eps) {
  int w = b.Param(name + ".weight", {c}, Ones(), ShardKind::kReplicated);
  int bias = b.Param(name + ".bias", {c}, Zeros(), ShardKind::kReplicated);
  return b.Node("layernorm", name, {x, w, bias}, c, block, Eps(eps));
}

// linear(x, name.weight [out, in] (+ name.bias [out])).
int Linear(Builder& b, const ModelSpec& s, const std::string& name, int x, int64_t out, int64_t in,
           ShardKind shard, bool bias, int block) {
  std::vector<int> args = {x, b.Param(name + ".weight", {out, in}, Normal(s.init_std), shard)};
  if (bias)
    args.push_back(b.Param(name + ".bias", {out}, Zeros(),
                           shard == ShardKind::kRow ? ShardKind::kReplicated : shard));
  return b.Node("linear", name, args, out, block);
}

kernels::Attrs Heads(const ModelSpec& s) {
  kernels::Attrs a;
  a.SetInt("n_head", s.n_head);
  a.SetInt("n_kv_head", s.n_head);
  return a;
}

float EpsOf(const ModelSpec& s) { return s.norm_eps > 0 ? s.norm_eps : 1e-5f; }

// OPT block i: attention and MLP, pre- or post-LN.
int OptBlock(Builder& b, const ModelSpec& s, int x, int i, int doc_or_pads) {
  const int64_t C = s.n_embd, F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
  const std::string p = "layers." + std::to_string(i) + ".";
  const bool pre = s.arch.pre_norm;
  int h = pre ? LayerNormNode(b, p + "self_attn_layer_norm", x, C, i, EpsOf(s)) : x;
  h = Linear(b, s, p + "self_attn.qkv", h, 3 * C, C, ShardKind::kColumn, true, i);
  h = b.Node("attention", p + "self_attn.att", WithPads({h}, doc_or_pads), C, i, Heads(s));
  h = Linear(b, s, p + "self_attn.out_proj", h, C, C, ShardKind::kRow, true, i);
  h = MaybeDropout(b, h, p + "self_attn.drop", C, i, s.dropout);
  x = b.Node("add", p + "res_1", {x, h}, C, i);
  if (!pre) x = LayerNormNode(b, p + "self_attn_layer_norm", x, C, i, EpsOf(s));
  h = pre ? LayerNormNode(b, p + "final_layer_norm", x, C, i, EpsOf(s)) : x;
  h = Linear(b, s, p + "fc1", h, F, C, ShardKind::kColumn, true, i);
  h = b.Node("relu", p + "relu", {h}, F, i);
  h = Linear(b, s, p + "fc2", h, C, F, ShardKind::kRow, true, i);
  h = MaybeDropout(b, h, p + "mlp.drop", C, i, s.dropout);
  x = b.Node("add", p + "res_2", {x, h}, C, i);
  if (!pre) x = LayerNormNode(b, p + "final_layer_norm", x, C, i, EpsOf(s));
  return x;
}

}  // namespace

void BuildOpt(const ModelSpec& s, Graph* g) {
  Builder b(g);
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer;
  const int64_t P = s.arch.embed_proj_dim > 0 ? s.arch.embed_proj_dim : C;
  const int offset = s.arch.position_offset;
  int ids = b.Data("ids", TensorRole::kInput);
  int targets = b.Data("targets", TensorRole::kTarget);
  int emb = b.Param("embed_tokens", {V, P}, Normal(s.init_std), ShardKind::kVocab);
  int pos = b.Param("embed_positions", {s.max_seq_len + offset, C}, Normal(s.init_std),
                    ShardKind::kReplicated);
  const TokenInputs tok = PerTokenInputs(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, emb}, P, -1);
  if (P != C) x = Linear(b, s, "project_in", x, C, P, ShardKind::kReplicated, false, -1);
  kernels::Attrs shift;
  if (offset > 0) shift.SetInt("offset", offset);
  x = b.Node("position_embedding", "emb", WithPads({x, pos}, tok.positions), C, -1, shift);
  x = MaybeDropout(b, x, "emb_drop", C, -1, s.dropout);
  for (int i = 0; i < L; ++i) x = OptBlock(b, s, x, i, tok.attention);
  if (s.arch.pre_norm) x = LayerNormNode(b, "final_layer_norm", x, C, L, EpsOf(s));
  if (P != C) x = Linear(b, s, "project_out", x, P, C, ShardKind::kReplicated, false, L);
  g->loss = OutputHead(b, s, x, P, emb, s.tie_embeddings != 0, targets, {});
}

void BuildGptNeox(const ModelSpec& s, Graph* g) {
  Builder b(g);
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer, D = C / s.n_head;
  const int64_t F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
  int ids = b.Data("ids", TensorRole::kInput);
  int targets = b.Data("targets", TensorRole::kTarget);
  int emb = b.Param("embed_in", {V, C}, Normal(s.init_std), ShardKind::kVocab);
  const TokenInputs tok = PerTokenInputs(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, emb}, C, -1);
  kernels::Attrs rope = Heads(s);
  rope.SetFloat("theta", s.rope_theta);
  const int64_t rotary = static_cast<int64_t>(D * s.arch.rope.partial);
  if (rotary != D) rope.SetInt("rotary_dim", rotary);
  const bool bias = s.arch.attn_bias;
  const char* act = s.arch.act == "gelu_tanh" ? "gelu" : "gelu_erf";
  for (int i = 0; i < L; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    int h = LayerNormNode(b, p + "input_layernorm", x, C, i, EpsOf(s));
    h = Linear(b, s, p + "attn.qkv", h, 3 * C, C, ShardKind::kColumn, bias, i);
    h = b.Node("rope", p + "attn.rope", WithPads({h}, tok.positions), 3 * C, i, rope);
    h = b.Node("attention", p + "attn.att", WithPads({h}, tok.attention), C, i, Heads(s));
    int a = Linear(b, s, p + "attn.dense", h, C, C, ShardKind::kRow, bias, i);
    if (!s.arch.parallel_residual) x = b.Node("add", p + "res_1", {x, a}, C, i);
    h = LayerNormNode(b, p + "post_attention_layernorm", x, C, i, EpsOf(s));
    h = Linear(b, s, p + "mlp.dense_h_to_4h", h, F, C, ShardKind::kColumn, true, i);
    h = b.Node(act, p + "mlp.act", {h}, F, i);
    h = Linear(b, s, p + "mlp.dense_4h_to_h", h, C, F, ShardKind::kRow, true, i);
    if (s.arch.parallel_residual) h = b.Node("add", p + "mlp_plus_attn", {h, a}, C, i);
    x = b.Node("add", p + "res_2", {x, h}, C, i);
  }
  x = LayerNormNode(b, "final_layer_norm", x, C, L, EpsOf(s));
  g->loss = OutputHead(b, s, x, C, emb, s.tie_embeddings == 1, targets, {});
}

}  // namespace ds::graph_internal
