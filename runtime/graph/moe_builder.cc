#include "runtime/graph/moe_builder.h"

#include <functional>

namespace ds::graph_internal {
namespace {

struct Routed {
  int routes, weights, aux, capacity;
};

// gate linear + router (block i); names under `p`.
Routed Route(Builder& b, const MoeSpec& moe, const std::string& p, int h, int64_t c, int block,
             float init_std) {
  const int e = moe.num_experts;
  int gate = b.Param(p + "gate.weight", {e, c}, Normal(init_std), ShardKind::kReplicated);
  int logits = b.Node("linear", p + "gate", {h, gate}, e, block);
  std::vector<int> out = b.Nodes("moe_router", p + "router",
                                 {{p + "routes", DType::kI32},
                                  {p + "combine_weights", DType::kF32},
                                  {p + "aux_loss", DType::kF32},
                                  {p + "capacity", DType::kF32}},
                                 {logits}, block, GatingAttrs(moe));
  return {out[0], out[1], out[2], out[3]};
}

int Expert(Builder& b, const std::string& name, int x, int cap, int w, int bias, int block) {
  std::vector<int> in = {x, cap, w};
  if (bias >= 0) in.push_back(bias);
  return b.Node("expert_linear", name, in, -1, block);
}

}  // namespace

bool IsMoeBlock(const MoeSpec& moe, int block) {
  return moe.num_experts > 0 && (block + 1) % moe.expert_interval == 0;
}

Status CheckMoeSpec(const ModelSpec& s) {
  const MoeSpec& m = s.moe;
  auto bad = [](const std::string& msg) { return InvalidArgumentError("model: " + msg); };
  if (m.num_experts == 0) return OkStatus();
  if (m.num_experts < 0) return bad("num_experts must be positive (or 0 for a dense model)");
  if (m.expert_interval < 1 || m.expert_interval > s.n_layer)
    return bad("expert_interval " + std::to_string(m.expert_interval) + " must be in [1, n_layer " +
               std::to_string(s.n_layer) + "]");
  if (m.top_k < 1 || m.top_k > 2)
    return bad("top_k " + std::to_string(m.top_k) + " is not supported (1 or 2)");
  if (m.top_k > m.num_experts)
    return bad("top_k " + std::to_string(m.top_k) + " exceeds num_experts " +
               std::to_string(m.num_experts));
  if (m.capacity_factor <= 0 || m.eval_capacity_factor <= 0)
    return bad("capacity_factor and eval_capacity_factor must be positive");
  if (m.min_capacity < 0) return bad("min_capacity must not be negative");
  if (m.noisy_gate_policy == "jitter")
    return bad("noisy_gate_policy \"jitter\" is not supported (\"none\" or \"rsample\")");
  if (m.noisy_gate_policy != "none" && m.noisy_gate_policy != "rsample")
    return bad("unknown noisy_gate_policy \"" + m.noisy_gate_policy + "\" (none or rsample)");
  if (m.noisy_gate_policy == "rsample" && m.top_k != 1)
    return bad("noisy_gate_policy rsample applies to top_k 1 (top-2 samples its second expert)");
  if (m.second_expert != "sample" && m.second_expert != "argmax")
    return bad("unknown second_expert \"" + m.second_expert + "\" (sample or argmax)");
  if (m.use_residual && s.family != "gpt2") return bad("use_residual (PR-MoE) is a gpt2 option");
  if (m.aux_loss_coeff < 0) return bad("moe_loss_coeff must not be negative");
  if (m.expert_ffn_hidden < 0) return bad("expert_ffn_hidden must not be negative");
  return OkStatus();
}

kernels::Attrs GatingAttrs(const MoeSpec& m) {
  kernels::Attrs a;
  a.SetInt("num_experts", m.num_experts);
  a.SetInt("top_k", m.top_k);
  a.SetFloat("capacity_factor", m.capacity_factor);
  a.SetFloat("eval_capacity_factor", m.eval_capacity_factor);
  a.SetInt("min_capacity", m.min_capacity);
  a.SetInt("drop_tokens", m.drop_tokens ? 1 : 0);
  a.SetString("noisy_gate_policy", m.noisy_gate_policy);
  a.SetString("second_expert", m.second_expert);
  a.SetInt("use_rts", m.use_rts ? 1 : 0);
  return a;
}

int Gpt2MoeMlp(Builder& b, const ModelSpec& s, const std::string& prefix, int h, int block,
               int64_t ffn, float proj_std, std::vector<int>* aux,
               const std::function<int()>& dense) {
  const MoeSpec& m = s.moe;
  const int64_t c = s.n_embd, e = m.num_experts;
  const int64_t f = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : ffn;
  const std::string p = prefix + "mlp.";
  Routed r = Route(b, m, p, h, c, block, s.init_std);
  aux->push_back(r.aux);
  const std::string x = p + "experts.";
  int fcw = b.Param(x + "fc.weight", {e, f, c}, Normal(s.init_std), ShardKind::kExpert);
  int fcb = b.Param(x + "fc.bias", {e, f}, Zeros(), ShardKind::kExpert);
  int pw = b.Param(x + "proj.weight", {e, c, f}, Normal(proj_std), ShardKind::kExpert);
  int pb = b.Param(x + "proj.bias", {e, c}, Zeros(), ShardKind::kExpert);
  int d =
      b.Node("moe_dispatch", p + "dispatch", {h, r.routes, r.capacity}, -1, block, GatingAttrs(m));
  int y = Expert(b, x + "fc", d, r.capacity, fcw, fcb, block);
  y = b.Node("gelu", x + "gelu", {y}, -1, block);
  y = Expert(b, x + "proj", y, r.capacity, pw, pb, block);
  int out = b.Node("moe_combine", p + "combine", {y, r.routes, r.weights, r.capacity}, c, block);
  if (!m.use_residual) return out;
  int mlp = dense();
  int cw = b.Param(p + "coefficient.weight", {2, c}, Normal(s.init_std), ShardKind::kReplicated);
  int cb = b.Param(p + "coefficient.bias", {2}, Zeros(), ShardKind::kReplicated);
  int coef = b.Node("linear", p + "coefficient", {h, cw, cb}, 2, block);
  return b.Node("moe_residual_mix", p + "residual_mix", {out, mlp, coef}, c, block);
}

int LlamaMoeMlp(Builder& b, const ModelSpec& s, const std::string& prefix, int h, int block,
                int64_t ffn, std::vector<int>* aux) {
  const MoeSpec& m = s.moe;
  const int64_t c = s.n_embd, e = m.num_experts;
  const int64_t f = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : ffn;
  const std::string p = prefix + "block_sparse_moe.";
  Routed r = Route(b, m, p, h, c, block, s.init_std);
  aux->push_back(r.aux);
  const std::string x = p + "experts.";
  int w1 = b.Param(x + "w1.weight", {e, f, c}, Normal(s.init_std), ShardKind::kExpert);
  int w3 = b.Param(x + "w3.weight", {e, f, c}, Normal(s.init_std), ShardKind::kExpert);
  int w2 = b.Param(x + "w2.weight", {e, c, f}, Normal(s.init_std), ShardKind::kExpert);
  int d =
      b.Node("moe_dispatch", p + "dispatch", {h, r.routes, r.capacity}, -1, block, GatingAttrs(m));
  int gate = Expert(b, x + "w1", d, r.capacity, w1, -1, block);
  int up = Expert(b, x + "w3", d, r.capacity, w3, -1, block);
  gate = b.Node("silu", x + "silu", {gate}, -1, block);
  int y = b.Node("mul", x + "swiglu", {gate, up}, -1, block);
  y = Expert(b, x + "w2", y, r.capacity, w2, -1, block);
  return b.Node("moe_combine", p + "combine", {y, r.routes, r.weights, r.capacity}, c, block);
}

int MoeTotalLoss(Builder& b, const MoeSpec& moe, int loss, const std::vector<int>& aux, int block) {
  if (aux.empty()) return loss;
  std::vector<int> in = {loss};
  in.insert(in.end(), aux.begin(), aux.end());
  kernels::Attrs a;
  a.SetFloat("coeff", moe.aux_loss_coeff);
  return b.Node("moe_loss", "loss", in, 0, block, a);
}

}  // namespace ds::graph_internal
