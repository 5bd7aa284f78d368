#include "runtime/graph/model_builder.h"

#include <cmath>
#include <map>

#include "runtime/base/status_macros.h"
#include "runtime/graph/graph_builder.h"
#include "runtime/graph/moe_builder.h"

namespace ds {
namespace {

using graph_internal::Builder;
using graph_internal::Gpt2MoeMlp;
using graph_internal::IsMoeBlock;
using graph_internal::LlamaMoeMlp;
using graph_internal::MoeTotalLoss;
using graph_internal::Normal;
using graph_internal::Ones;
using graph_internal::Zeros;

kernels::Attrs Eps(float eps) {
  kernels::Attrs a;
  a.SetFloat("eps", eps);
  return a;
}

int MaybeDropout(Builder& b, int x, const std::string& name, int64_t width, int block, float p) {
  if (p <= 0) return x;
  kernels::Attrs a;
  a.SetFloat("p", p);
  return b.Node("dropout", name, {x}, width, block, a);
}

// What the final norm's output `x` feeds: the next-token logits and cross-entropy (head "lm",
// over `embedding` when tied, else a head of its own), or DeepSpeed-Chat's reward head: a value
// per position (v_head, no bias) and the pairwise loss at the positions the targets mark.
int OutputHead(Builder& b, const ModelSpec& s, int x, int embedding, bool tied, int targets,
               const std::vector<int>& aux) {
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer;
  const std::string name = aux.empty() ? "loss" : "model_loss";
  auto per_token = [&b](const char* n) {  // the caller's [batch, seq] fp32 input (kState)
    return b.Data(n, TensorRole::kState, DType::kF32);
  };
  if (s.head == "reward" || s.head == "ppo_critic") {
    int v = b.Param("v_head.weight", {1, C}, Normal(s.init_std), ShardKind::kReplicated);
    int values = b.Node("linear", "values", {x, v}, 1, L);
    int loss = -1;
    if (s.head == "reward") {
      loss = b.Node("reward_pair_loss", name, {values, targets}, 0, L);
    } else {
      kernels::Attrs a;
      a.SetFloat("cliprange_value", s.cliprange_value);
      loss =
          b.Node("ppo_value_loss", name,
                 {values, per_token("ppo.old_values"), per_token("ppo.returns"), targets}, 0, L, a);
    }
    return MoeTotalLoss(b, s.moe, loss, aux, L);
  }
  int head = embedding;
  if (!tied) head = b.Param("lm_head.weight", {V, C}, Normal(s.init_std), ShardKind::kVocab);
  int logits = b.Node("linear", "logits", {x, head}, V, L);
  int loss = -1;
  if (s.head == "ppo_actor") {
    kernels::Attrs a;
    a.SetFloat("cliprange", s.cliprange);
    loss = b.Node("ppo_actor_loss", name,
                  {logits, targets, per_token("ppo.old_logprobs"), per_token("ppo.advantages"),
                   per_token("ppo.mask"), per_token("ppo.ptx")},
                  0, L, a);
  } else {
    loss = b.Node("cross_entropy", name, {logits, targets}, 0, L);
  }
  return MoeTotalLoss(b, s.moe, loss, aux, L);
}

// pad_mask: the caller's left pads per sequence, int32 [batch] (kState "pad.left"), which
// attention masks and the position ops subtract; -1 without.
int LeftPads(Builder& b, const ModelSpec& s) {
  if (!s.pad_mask) return -1;
  const int t = b.Data(kLeftPads, TensorRole::kState, DType::kI32);
  b.graph()->tensors[t].shape = {Dim::Sym("batch")};
  return t;
}

// `in` plus the pads when there are any.
std::vector<int> WithPads(std::vector<int> in, int pads) {
  if (pads >= 0) in.push_back(pads);
  return in;
}

void BuildGpt2(const ModelSpec& s, Graph* g) {
  Builder b(g);
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer;
  const int64_t F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
  const float eps = s.norm_eps > 0 ? s.norm_eps : 1e-5f;
  const float proj_std = s.init_std / std::sqrt(2.0f * L);  // GPT-2's residual scaling
  int ids = b.Data("ids", TensorRole::kInput);
  int targets = b.Data("targets", TensorRole::kTarget);
  int wte = b.Param("wte", {V, C}, Normal(s.init_std), ShardKind::kVocab);
  int wpe = b.Param("wpe", {s.max_seq_len, C}, Normal(0.01f), ShardKind::kReplicated);
  const int pads = LeftPads(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, wte}, C, -1);
  x = b.Node("position_embedding", "emb", WithPads({x, wpe}, pads), C, -1);
  x = MaybeDropout(b, x, "emb_drop", C, -1, s.dropout);
  kernels::Attrs heads;
  heads.SetInt("n_head", s.n_head);
  heads.SetInt("n_kv_head", s.n_head);
  std::vector<int> aux;  // the MoE layers' aux losses
  for (int i = 0; i < L; ++i) {
    std::string p = "h." + std::to_string(i) + ".";
    int ln1w = b.Param(p + "ln_1.weight", {C}, Ones(), ShardKind::kReplicated);
    int ln1b = b.Param(p + "ln_1.bias", {C}, Zeros(), ShardKind::kReplicated);
    int qkvw = b.Param(p + "attn.qkv.weight", {3 * C, C}, Normal(s.init_std), ShardKind::kColumn);
    int qkvb = b.Param(p + "attn.qkv.bias", {3 * C}, Zeros(), ShardKind::kColumn);
    int projw = b.Param(p + "attn.proj.weight", {C, C}, Normal(proj_std), ShardKind::kRow);
    int projb = b.Param(p + "attn.proj.bias", {C}, Zeros(), ShardKind::kReplicated);
    int ln2w = b.Param(p + "ln_2.weight", {C}, Ones(), ShardKind::kReplicated);
    int ln2b = b.Param(p + "ln_2.bias", {C}, Zeros(), ShardKind::kReplicated);
    int h = b.Node("layernorm", p + "ln_1", {x, ln1w, ln1b}, C, i, Eps(eps));
    h = b.Node("linear", p + "attn.qkv", {h, qkvw, qkvb}, 3 * C, i);
    h = b.Node("attention", p + "attn.att", WithPads({h}, pads), C, i, heads);
    h = b.Node("linear", p + "attn.proj", {h, projw, projb}, C, i);
    h = MaybeDropout(b, h, p + "attn.drop", C, i, s.dropout);
    x = b.Node("add", p + "res_1", {x, h}, C, i);
    h = b.Node("layernorm", p + "ln_2", {x, ln2w, ln2b}, C, i, Eps(eps));
    auto dense = [&, h] {
      int fcw = b.Param(p + "mlp.fc.weight", {F, C}, Normal(s.init_std), ShardKind::kColumn);
      int fcb = b.Param(p + "mlp.fc.bias", {F}, Zeros(), ShardKind::kColumn);
      int mpw = b.Param(p + "mlp.proj.weight", {C, F}, Normal(proj_std), ShardKind::kRow);
      int mpb = b.Param(p + "mlp.proj.bias", {C}, Zeros(), ShardKind::kReplicated);
      int y = b.Node("linear", p + "mlp.fc", {h, fcw, fcb}, F, i);
      y = b.Node("gelu", p + "mlp.gelu", {y}, F, i);
      return b.Node("linear", p + "mlp.proj", {y, mpw, mpb}, C, i);
    };
    h = IsMoeBlock(s.moe, i) ? Gpt2MoeMlp(b, s, p, h, i, F, proj_std, &aux, dense) : dense();
    h = MaybeDropout(b, h, p + "mlp.drop", C, i, s.dropout);
    x = b.Node("add", p + "res_2", {x, h}, C, i);
  }
  int lnfw = b.Param("ln_f.weight", {C}, Ones(), ShardKind::kReplicated);
  int lnfb = b.Param("ln_f.bias", {C}, Zeros(), ShardKind::kReplicated);
  x = b.Node("layernorm", "ln_f", {x, lnfw, lnfb}, C, L, Eps(eps));
  g->loss = OutputHead(b, s, x, wte, s.tie_embeddings != 0, targets, aux);
}

void BuildLlama(const ModelSpec& s, Graph* g) {
  Builder b(g);
  const int64_t C = s.n_embd, V = s.vocab_size, L = s.n_layer;
  const int64_t H = s.n_head, KV = s.n_kv_head > 0 ? s.n_kv_head : s.n_head, D = C / H;
  int64_t F = s.ffn_hidden;
  if (F <= 0) F = (8 * C / 3 + 63) / 64 * 64;
  const float eps = s.norm_eps > 0 ? s.norm_eps : 1e-5f;
  int ids = b.Data("ids", TensorRole::kInput);
  int targets = b.Data("targets", TensorRole::kTarget);
  int emb = b.Param("embed_tokens", {V, C}, Normal(s.init_std), ShardKind::kVocab);
  const int pads = LeftPads(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, emb}, C, -1);
  kernels::Attrs heads;
  heads.SetInt("n_head", H);
  heads.SetInt("n_kv_head", KV);
  kernels::Attrs rope = heads;
  rope.SetFloat("theta", s.rope_theta);
  const int64_t qkv_rows = (H + 2 * KV) * D;
  std::vector<int> aux;  // the MoE layers' aux losses
  for (int i = 0; i < L; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    int n1w = b.Param(p + "input_layernorm.weight", {C}, Ones(), ShardKind::kReplicated);
    int qkvw =
        b.Param(p + "attn.qkv.weight", {qkv_rows, C}, Normal(s.init_std), ShardKind::kColumn);
    int ow = b.Param(p + "attn.o_proj.weight", {C, H * D}, Normal(s.init_std), ShardKind::kRow);
    int n2w = b.Param(p + "post_attention_layernorm.weight", {C}, Ones(), ShardKind::kReplicated);
    int h = b.Node("rmsnorm", p + "input_layernorm", {x, n1w}, C, i, Eps(eps));
    h = b.Node("linear", p + "attn.qkv", {h, qkvw}, qkv_rows, i);
    h = b.Node("rope", p + "attn.rope", WithPads({h}, pads), qkv_rows, i, rope);
    h = b.Node("attention", p + "attn.att", WithPads({h}, pads), H * D, i, heads);
    h = b.Node("linear", p + "attn.o_proj", {h, ow}, C, i);
    x = b.Node("add", p + "res_1", {x, h}, C, i);
    h = b.Node("rmsnorm", p + "post_attention_layernorm", {x, n2w}, C, i, Eps(eps));
    if (IsMoeBlock(s.moe, i)) {
      h = LlamaMoeMlp(b, s, p, h, i, F, &aux);
    } else {
      int gw = b.Param(p + "mlp.gate_proj.weight", {F, C}, Normal(s.init_std), ShardKind::kColumn);
      int uw = b.Param(p + "mlp.up_proj.weight", {F, C}, Normal(s.init_std), ShardKind::kColumn);
      int dw = b.Param(p + "mlp.down_proj.weight", {C, F}, Normal(s.init_std), ShardKind::kRow);
      int gate = b.Node("linear", p + "mlp.gate", {h, gw}, F, i);
      int up = b.Node("linear", p + "mlp.up", {h, uw}, F, i);
      gate = b.Node("silu", p + "mlp.silu", {gate}, F, i);
      h = b.Node("mul", p + "mlp.swiglu", {gate, up}, F, i);
      h = b.Node("linear", p + "mlp.down", {h, dw}, C, i);
    }
    x = b.Node("add", p + "res_2", {x, h}, C, i);
  }
  int nw = b.Param("norm.weight", {C}, Ones(), ShardKind::kReplicated);
  x = b.Node("rmsnorm", "norm", {x, nw}, C, L, Eps(eps));
  g->loss = OutputHead(b, s, x, emb, s.tie_embeddings == 1, targets, aux);
}

}  // namespace

Status CheckModelSpec(const ModelSpec& s) {
  auto bad = [&](const std::string& m) { return InvalidArgumentError("model: " + m); };
  if (s.family != "gpt2" && s.family != "llama")
    return bad("unknown family \"" + s.family + "\" (gpt2 or llama)");
  if (s.head != "lm" && s.head != "reward" && s.head != "ppo_actor" && s.head != "ppo_critic")
    return bad("unknown head \"" + s.head + "\" (lm, reward, ppo_actor or ppo_critic)");
  if (s.n_layer <= 0 || s.n_embd <= 0 || s.n_head <= 0 || s.vocab_size <= 0 || s.max_seq_len <= 0)
    return bad("n_layer, n_embd, n_head, vocab_size and max_seq_len must be positive");
  if (s.n_embd % s.n_head)
    return bad("n_embd " + std::to_string(s.n_embd) + " is not divisible by n_head " +
               std::to_string(s.n_head));
  int kv = s.n_kv_head > 0 ? s.n_kv_head : s.n_head;
  if (s.n_head % kv)
    return bad("n_head " + std::to_string(s.n_head) + " is not divisible by n_kv_head " +
               std::to_string(kv));
  if (s.family == "gpt2" && kv != s.n_head)
    return bad("gpt2 uses multi-head attention (n_kv_head = n_head)");
  if (s.family == "llama" && (s.n_embd / s.n_head) % 2) return bad("RoPE needs an even head size");
  if (s.dropout < 0 || s.dropout >= 1) return bad("dropout must be in [0, 1)");
  if (s.ffn_hidden < 0) return bad("ffn_hidden must be positive (or 0 for the default)");
  return graph_internal::CheckMoeSpec(s);
}

StatusOr<Graph> BuildModelGraph(const ModelSpec& s) {
  DS_RETURN_IF_ERROR(CheckModelSpec(s));
  Graph g;
  g.family = s.family;
  g.num_blocks = s.n_layer;
  g.name = s.family + "-L" + std::to_string(s.n_layer) + "-C" + std::to_string(s.n_embd);
  g.config = {{"n_layer", s.n_layer},       {"n_embd", s.n_embd},
              {"n_head", s.n_head},         {"n_kv_head", s.n_kv_head > 0 ? s.n_kv_head : s.n_head},
              {"vocab_size", s.vocab_size}, {"max_seq_len", s.max_seq_len}};
  if (s.moe.num_experts > 0) {
    g.name += "-E" + std::to_string(s.moe.num_experts);
    g.config["num_experts"] = s.moe.num_experts;
    g.config["moe_top_k"] = s.moe.top_k;
    g.config["expert_interval"] = s.moe.expert_interval;
  }
  if (s.family == "gpt2")
    BuildGpt2(s, &g);
  else
    BuildLlama(s, &g);
  return g;
}

std::vector<std::string> ModelPresetNames() {
  return {"gpt2-tiny",   "gpt2-small-test", "gpt2-124m",     "gpt2-350m",     "llama-tiny",
          "llama-small", "llama-1b",        "gpt2-moe-tiny", "llama-moe-tiny"};
}

StatusOr<ModelSpec> ModelPreset(const std::string& name) {
  ModelSpec s;
  if (name == "gpt2-tiny") {
    s = {"gpt2", 2, 64, 4, 0, 64, 64};
  } else if (name == "gpt2-small-test") {  // the benchmark shape of the engine issue
    s = {"gpt2", 4, 256, 4, 0, 8192, 256};
  } else if (name == "gpt2-124m") {
    s = {"gpt2", 12, 768, 12, 0, 50257, 1024};
  } else if (name == "gpt2-350m") {
    s = {"gpt2", 24, 1024, 16, 0, 50257, 1024};
  } else if (name == "llama-tiny") {
    s = {"llama", 2, 64, 4, 2, 64, 64};
  } else if (name == "llama-small") {
    s = {"llama", 4, 256, 8, 4, 8192, 256};
  } else if (name == "llama-1b") {  // Llama 3.2 1B shape
    s = {"llama", 16, 2048, 32, 8, 128256, 2048};
    s.ffn_hidden = 8192;
    s.rope_theta = 500000.0f;
  } else if (name == "gpt2-moe-tiny") {  // 4 experts in every second block, top-1
    s = {"gpt2", 2, 64, 4, 0, 64, 64};
    s.moe.num_experts = 4;
    s.moe.expert_interval = 2;
  } else if (name == "llama-moe-tiny") {  // Mixtral-style: 4 top-2 experts in every block
    s = {"llama", 2, 64, 4, 2, 64, 64};
    s.moe.num_experts = 4;
    s.moe.top_k = 2;
  } else {
    std::string known;
    for (const std::string& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown model preset \"" + name + "\" (known: " + known + ")");
  }
  return s;
}

}  // namespace ds
