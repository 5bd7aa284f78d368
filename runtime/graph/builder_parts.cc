#include "runtime/graph/builder_parts.h"

#include "runtime/graph/moe_builder.h"

namespace ds::graph_internal {

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

namespace {

// The reward model's and PPO critic's value head: a value per position (v_head, no bias).
int ValueHead(Builder& b, const ModelSpec& s, int x, int64_t width, int targets,
              const std::string& name) {
  const int L = s.n_layer;
  auto per_token = [&b](const char* n) {  // the caller's [batch, seq] fp32 input (kState)
    return b.Data(n, TensorRole::kState, DType::kF32);
  };
  int v = b.Param("v_head.weight", {1, width}, Normal(s.init_std), ShardKind::kReplicated);
  int values = b.Node("linear", "values", {x, v}, 1, L);
  if (s.head == "reward") return b.Node("reward_pair_loss", name, {values, targets}, 0, L);
  kernels::Attrs a;
  a.SetFloat("cliprange_value", s.cliprange_value);
  return b.Node("ppo_value_loss", name,
                {values, per_token("ppo.old_values"), per_token("ppo.returns"), targets}, 0, L, a);
}

}  // namespace

int OutputHead(Builder& b, const ModelSpec& s, int x, int64_t width, int embedding, bool tied,
               int targets, const std::vector<int>& aux) {
  const int64_t V = s.vocab_size, L = s.n_layer;
  const std::string name = aux.empty() ? "loss" : "model_loss";
  if (s.head == "reward" || s.head == "ppo_critic")
    return MoeTotalLoss(b, s.moe, ValueHead(b, s, x, width, targets, name), aux, L);
  auto per_token = [&b](const char* n) { return b.Data(n, TensorRole::kState, DType::kF32); };
  int head = embedding;
  if (!tied) head = b.Param("lm_head.weight", {V, width}, Normal(s.init_std), ShardKind::kVocab);
  int logits = b.Node("linear", "logits", {x, head}, V, L);
  if (s.arch.final_softcap > 0) {
    kernels::Attrs cap;
    cap.SetFloat("cap", s.arch.final_softcap);
    logits = b.Node("softcap", "logits.capped", {logits}, V, L, cap);
  }
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

TokenInputs PerTokenInputs(Builder& b, const ModelSpec& s) {
  auto state = [&](const char* name, SymShape shape) {
    const int t = b.Data(name, TensorRole::kState, DType::kI32);
    b.graph()->tensors[t].shape = std::move(shape);
    return t;
  };
  TokenInputs in;
  if (s.pad_mask) {
    in.attention = in.positions = state(kLeftPads, {Dim::Sym("batch")});
    return in;
  }
  if (s.reset_attention_mask)
    in.attention = state(kDocStarts, {Dim::Sym("batch"), Dim::Sym("seq")});
  if (s.reset_position_ids)
    in.positions = state(kDocPositions, {Dim::Sym("batch"), Dim::Sym("seq")});
  return in;
}

std::vector<int> WithPads(std::vector<int> in, int pads) {
  if (pads >= 0) in.push_back(pads);
  return in;
}

}  // namespace ds::graph_internal
