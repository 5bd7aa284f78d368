#include "runtime/graph/model_builder.h"

#include <cmath>
#include <map>

#include "runtime/base/status_macros.h"
#include "runtime/graph/builder_parts.h"
#include "runtime/graph/moe_builder.h"

namespace ds {
namespace {

using graph_internal::Builder;
using graph_internal::Eps;
using graph_internal::Gpt2MoeMlp;
using graph_internal::IsMoeBlock;
using graph_internal::MaybeDropout;
using graph_internal::Normal;
using graph_internal::Ones;
using graph_internal::OutputHead;
using graph_internal::PerTokenInputs;
using graph_internal::TokenInputs;
using graph_internal::WithPads;
using graph_internal::Zeros;

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
  const TokenInputs tok = PerTokenInputs(b, s);
  int x = b.Node("embedding", "tok_emb", {ids, wte}, C, -1);
  x = b.Node("position_embedding", "emb", WithPads({x, wpe}, tok.positions), C, -1);
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
    h = b.Node("attention", p + "attn.att", WithPads({h}, tok.attention), C, i, heads);
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
  g->loss = OutputHead(b, s, x, C, wte, s.tie_embeddings != 0, targets, aux);
}

}  // namespace

bool IsLlamaLike(const std::string& f) {
  return f == "llama" || f == "mistral" || f == "qwen2" || f == "qwen3" || f == "phi3" ||
         f == "gemma" || f == "gemma2";
}

namespace {

// The checks of the architecture options (ArchSpec) for `s`'s family.
Status CheckArch(const ModelSpec& s) {
  auto bad = [&](const std::string& m) { return InvalidArgumentError("model: " + m); };
  const ArchSpec& a = s.arch;
  const int64_t head_dim = a.head_dim > 0 ? a.head_dim : s.n_embd / s.n_head;
  if (a.head_dim < 0) return bad("head_dim must be positive (or 0 for n_embd / n_head)");
  if (a.head_dim > 0 && !IsLlamaLike(s.family))
    return bad("head_dim is an option of the Llama-like families, not " + s.family);
  if (a.head_dim == 0 && s.n_embd % s.n_head)
    return bad("n_embd " + std::to_string(s.n_embd) + " is not divisible by n_head " +
               std::to_string(s.n_head));
  const int64_t rotary = static_cast<int64_t>(head_dim * a.rope.partial);
  const bool roped = IsLlamaLike(s.family) || s.family == "gpt_neox";
  if (roped && (rotary < 2 || rotary % 2))
    return bad("RoPE needs an even number of rotary dims (head size " + std::to_string(head_dim) +
               ", partial " + std::to_string(a.rope.partial) + ")");
  if (a.sliding_window < 0) return bad("sliding_window must be >= 0");
  for (int l : a.sliding_layers)
    if (l < 0 || l >= s.n_layer) return bad("sliding layer " + std::to_string(l) + " out of range");
  if (a.embed_proj_dim < 0 || (a.embed_proj_dim > 0 && s.family != "opt"))
    return bad("embed_proj_dim is OPT's option (word_embed_proj_dim)");
  return OkStatus();
}

}  // namespace

Status CheckModelSpec(const ModelSpec& s) {
  auto bad = [&](const std::string& m) { return InvalidArgumentError("model: " + m); };
  if (s.family != "gpt2" && s.family != "opt" && s.family != "gpt_neox" && !IsLlamaLike(s.family))
    return bad("unknown family \"" + s.family +
               "\" (gpt2, llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, opt or gpt_neox)");
  if (s.head != "lm" && s.head != "reward" && s.head != "ppo_actor" && s.head != "ppo_critic")
    return bad("unknown head \"" + s.head + "\" (lm, reward, ppo_actor or ppo_critic)");
  if (s.n_layer <= 0 || s.n_embd <= 0 || s.n_head <= 0 || s.vocab_size <= 0 || s.max_seq_len <= 0)
    return bad("n_layer, n_embd, n_head, vocab_size and max_seq_len must be positive");
  int kv = s.n_kv_head > 0 ? s.n_kv_head : s.n_head;
  if (s.n_head % kv)
    return bad("n_head " + std::to_string(s.n_head) + " is not divisible by n_kv_head " +
               std::to_string(kv));
  if (!IsLlamaLike(s.family) && kv != s.n_head)
    return bad(s.family + " uses multi-head attention (n_kv_head = n_head)");
  DS_RETURN_IF_ERROR(CheckArch(s));
  if (s.dropout < 0 || s.dropout >= 1) return bad("dropout must be in [0, 1)");
  if (s.ffn_hidden < 0) return bad("ffn_hidden must be positive (or 0 for the default)");
  if (s.pad_mask && (s.reset_attention_mask || s.reset_position_ids))
    return bad(
        "pad_mask (left-padded rows) and packed documents' reset_attention_mask / "
        "reset_position_ids exclude each other");
  if (s.moe.num_experts > 0 && s.family != "gpt2" && s.family != "llama")
    return bad("mixture of experts is built for gpt2 and llama only");
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
  if (s.arch.head_dim > 0) g.config["head_dim"] = s.arch.head_dim;
  if (s.moe.num_experts > 0) {
    g.name += "-E" + std::to_string(s.moe.num_experts);
    g.config["num_experts"] = s.moe.num_experts;
    g.config["moe_top_k"] = s.moe.top_k;
    g.config["expert_interval"] = s.moe.expert_interval;
  }
  if (s.family == "gpt2")
    BuildGpt2(s, &g);
  else if (s.family == "opt")
    graph_internal::BuildOpt(s, &g);
  else if (s.family == "gpt_neox")
    graph_internal::BuildGptNeox(s, &g);
  else
    graph_internal::BuildLlama(s, &g);
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
