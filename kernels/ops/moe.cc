// The mixture-of-experts ops' definitions (kernels: kernels/cpu/moe_router.cc, moe.cc), after
// DeepSpeed-MoE (parallelism.md D). A token's path through an MoE MLP:
//   moe_router    gate logits [B, T, E] -> routes [B, T, k] (int32: the token's row in the
//                 dispatch buffer, e x buffer capacity + position, or -1 when capacity dropped it),
//                 weights [B, T, k] (the combine weights), aux [1] (the load-balancing loss) and
//                 capacity [1] (the step's capacity, a float so that the plan can all-reduce it
//                 with max over the expert-parallel group before the all-to-all)
//   moe_dispatch  x [B, T, C] -> [E, buffer capacity, C]: each kept token's row at its expert's
//                 position; expert e's rows at [e x capacity, (e + 1) x capacity), the rest zero
//   expert_linear (x [E, buffer capacity, in], capacity, W [E_local, out, in], b [E_local, out])
//                 -> [E, buffer capacity, out], block b through expert b mod E_local: after the
//                 expert-parallel all-to-all, block b holds source rank b / E_local's tokens for
//                 the rank's local expert b mod E_local; at E_local = E this is expert b
//   moe_combine   [E, buffer capacity, C] -> [B, T, C]: sum over the token's k routes of weight x
//                 its expert's output row
//   moe_residual_mix  Residual MoE (PR-MoE): softmax(coef [.., 2]) mixes the MoE and the dense MLP
//   moe_loss      loss + coeff x sum of the layers' aux losses: what backward starts from
//   moe_all_to_all  expert parallelism (parallel/expert/ep_graph.h): its output is the input buffer
//                 exchanged over the ep group, which the plan's ACT_ALL_TO_ALL writes (and the
//                 input's gradient, in backward); forward and backward do nothing
// expert_linear's attributes expert_begin and local_experts (expert parallelism) make it use
// experts [expert_begin, expert_begin + local_experts) of a W holding all of them.
// Under tensor parallelism (without sequence parallelism) every tp rank runs the MoE MLP whole
// on the whole tokens (TpRule::kReplicated: the experts' weights replicated, counted once in the
// norm); expert parallelism, not tp, splits the experts.
#include "kernels/moe_capacity.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

const std::vector<std::string> kGatingAttrs = {
    "num_experts",          "top_k",         "capacity_factor",
    "eval_capacity_factor", "min_capacity",  "drop_tokens",
    "noisy_gate_policy",    "second_expert", "use_rts"};

Status CheckGating(const char* op, const MoeGating& g) {
  if (g.num_experts < 1) return InvalidArgumentError(StrCat(op, ": num_experts must be positive"));
  if (g.top_k < 1 || g.top_k > 2 || g.top_k > g.num_experts)
    return InvalidArgumentError(StrCat(op, ": top_k ", g.top_k, " must be 1 or 2 and at most ",
                                       "num_experts (", g.num_experts, ")"));
  if (g.capacity_factor <= 0 || g.eval_capacity_factor <= 0 || g.min_capacity < 0)
    return InvalidArgumentError(
        StrCat(op, ": capacity factors must be positive and min_capacity not negative"));
  return OkStatus();
}

Shape TokenShape(const TensorSpec& t) { return Shape(t.shape.begin(), t.shape.end() - 1); }

Status CheckCapacity(const char* op, const TensorSpec& t) {
  DS_RETURN_IF_ERROR(CheckFloat(op, "capacity", t));
  if (t.shape != Shape{1})
    return InvalidArgumentError(
        StrCat(op, ": capacity has shape ", ShapeToString(t.shape), ", not [1]"));
  return OkStatus();
}

OpDef Router() {
  OpDef def;
  def.name = "moe_router";
  def.tp_rule = TpRule::kReplicated;
  def.num_outputs = 4;
  def.attr_names = kGatingAttrs;
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("moe_router", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckMinRank("moe_router", "logits", in[0], 2));
    DS_RETURN_IF_ERROR(CheckFloat("moe_router", "logits", in[0]));
    const MoeGating g = MoeGatingFrom(a);
    DS_RETURN_IF_ERROR(CheckGating("moe_router", g));
    if (in[0].shape.back() != g.num_experts)
      return InvalidArgumentError(StrCat("moe_router: logits have ", in[0].shape.back(),
                                         " columns for ", g.num_experts, " experts"));
    Shape routes = TokenShape(in[0]);
    routes.push_back(g.top_k);
    *out = {TensorSpec{routes, DType::kI32}, TensorSpec{routes, DType::kF32},
            TensorSpec{{1}, DType::kF32}, TensorSpec{{1}, DType::kF32}};
    return OkStatus();
  };
  // Softmax, the choices and the positions per token and expert; backward the same again.
  SetPerElementFlops(&def, 8.0, 8.0);
  // The gate probabilities and each expert's share of first choices (the aux loss's ce).
  def.saved = [](const Attrs& a, const std::vector<TensorSpec>& in) {
    return std::vector<TensorSpec>{in[0], TensorSpec{{MoeGatingFrom(a).num_experts}, DType::kF32}};
  };
  def.backward_reads_outputs = 0b11;
  return def;
}

OpDef Dispatch() {
  OpDef def;
  def.name = "moe_dispatch";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = 3;
  def.attr_names = kGatingAttrs;
  def.infer = [](const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("moe_dispatch", in, 3, 3));
    DS_RETURN_IF_ERROR(CheckFloat("moe_dispatch", "x", in[0]));
    DS_RETURN_IF_ERROR(CheckMinRank("moe_dispatch", "x", in[0], 2));
    DS_RETURN_IF_ERROR(CheckInt32("moe_dispatch", "routes", in[1]));
    DS_RETURN_IF_ERROR(CheckCapacity("moe_dispatch", in[2]));
    const MoeGating g = MoeGatingFrom(a);
    DS_RETURN_IF_ERROR(CheckGating("moe_dispatch", g));
    Shape want = TokenShape(in[0]);
    want.push_back(g.top_k);
    if (in[1].shape != want)
      return InvalidArgumentError(StrCat("moe_dispatch: routes have shape ",
                                         ShapeToString(in[1].shape), " but x needs ",
                                         ShapeToString(want)));
    const int64_t tokens = LeadingRows(in[0].shape);
    *out = {
        TensorSpec{{g.num_experts, MoeBufferCapacity(g, tokens), in[0].shape.back()}, in[0].dtype}};
    return OkStatus();
  };
  SetPerElementFlops(&def, 0.0, 1.0);
  def.backward_reads_inputs = 0b110;
  def.non_differentiable_inputs = 0b110;
  return def;
}

Status InferExpertLinear(const Attrs& a, const std::vector<TensorSpec>& in,
                         std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("expert_linear", in, 3, 4));
  DS_RETURN_IF_ERROR(CheckRank("expert_linear", "x", in[0], 3));
  DS_RETURN_IF_ERROR(CheckFloat("expert_linear", "x", in[0]));
  DS_RETURN_IF_ERROR(CheckCapacity("expert_linear", in[1]));
  DS_RETURN_IF_ERROR(CheckRank("expert_linear", "W", in[2], 3));
  DS_RETURN_IF_ERROR(CheckFloat("expert_linear", "W", in[2]));
  const TensorSpec& w = in[2];
  const int64_t begin = a.Int("expert_begin", 0), local = a.Int("local_experts", w.shape[0]);
  if (begin < 0 || local < 1 || begin + local > w.shape[0])
    return InvalidArgumentError(StrCat("expert_linear: experts [", begin, ", ", begin + local,
                                       ") are not within the weights' ", w.shape[0]));
  if (in[0].shape[0] % local || in[0].shape[2] != w.shape[2])
    return InvalidArgumentError(StrCat("expert_linear: x ", ShapeToString(in[0].shape),
                                       " does not fit expert weights ", ShapeToString(w.shape),
                                       " (blocks a multiple of the local experts, same features)"));
  if (in.size() == 4) {
    DS_RETURN_IF_ERROR(CheckFloat("expert_linear", "b", in[3]));
    if (in[3].shape != Shape{w.shape[0], w.shape[1]})
      return InvalidArgumentError(StrCat("expert_linear: b has shape ", ShapeToString(in[3].shape),
                                         " for weights ", ShapeToString(w.shape)));
  }
  *out = {TensorSpec{{in[0].shape[0], in[0].shape[1], w.shape[1]}, in[0].dtype}};
  return OkStatus();
}

OpDef ExpertLinear() {
  OpDef def;
  def.name = "expert_linear";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = 3;
  def.max_inputs = 4;  // x, capacity, W [, b]
  def.attr_names = {"expert_begin", "local_experts"};
  def.infer = InferExpertLinear;
  // Counted over the whole buffer: the capacity a step uses is known only when it runs.
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 2.0 * in[0].shape[0] * in[0].shape[1] * in[2].shape[1] * in[2].shape[2];
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].shape[0] * in[0].shape[1] * in[2].shape[1] * in[2].shape[2];
  };
  def.backward_reads_inputs = 0b0111;  // x, the capacity and W
  def.non_differentiable_inputs = 0b10;
  return def;
}

OpDef Combine() {
  OpDef def;
  def.name = "moe_combine";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = 4;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("moe_combine", in, 4, 4));
    DS_RETURN_IF_ERROR(CheckRank("moe_combine", "y", in[0], 3));
    DS_RETURN_IF_ERROR(CheckFloat("moe_combine", "y", in[0]));
    DS_RETURN_IF_ERROR(CheckInt32("moe_combine", "routes", in[1]));
    DS_RETURN_IF_ERROR(CheckSameShape("moe_combine", "weights", in[2], "routes", in[1]));
    DS_RETURN_IF_ERROR(CheckFloat("moe_combine", "weights", in[2]));
    DS_RETURN_IF_ERROR(CheckCapacity("moe_combine", in[3]));
    if (in[1].shape.size() < 2)
      return InvalidArgumentError("moe_combine: routes need a token shape and k");
    Shape shape = TokenShape(in[1]);
    shape.push_back(in[0].shape[2]);
    *out = {TensorSpec{shape, in[0].dtype}};
    return OkStatus();
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 2.0 * in[1].numel() * in[0].shape[2];
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[1].numel() * in[0].shape[2];
  };
  def.backward_reads_inputs = 0b1111;
  def.non_differentiable_inputs = 0b1010;
  return def;
}

OpDef ResidualMix() {
  OpDef def;
  def.name = "moe_residual_mix";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = 3;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("moe_residual_mix", in, 3, 3));
    DS_RETURN_IF_ERROR(CheckFloat("moe_residual_mix", "moe", in[0]));
    DS_RETURN_IF_ERROR(CheckSameShape("moe_residual_mix", "mlp", in[1], "moe", in[0]));
    Shape coef = TokenShape(in[0]);
    coef.push_back(2);
    if (in[2].shape != coef)
      return InvalidArgumentError(StrCat("moe_residual_mix: coefficients have shape ",
                                         ShapeToString(in[2].shape), ", not ",
                                         ShapeToString(coef)));
    *out = {in[0]};
    return OkStatus();
  };
  SetPerElementFlops(&def, 3.0, 6.0);
  def.backward_reads_inputs = 0b111;
  return def;
}

OpDef Loss() {
  OpDef def;
  def.name = "moe_loss";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = 2;
  def.max_inputs = 1 << 12;
  // metric_scale: how many times over the loss metric counts the aux terms (expert parallelism
  // with tp: each rank's objective carries 1/tp of its chunk's aux loss); compute ignores it.
  def.attr_names = {"coeff", "metric_scale"};
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    for (const TensorSpec& t : in)
      if (t.shape != Shape{1} || t.dtype != DType::kF32)
        return InvalidArgumentError("moe_loss: every input must be an fp32 scalar [1]");
    *out = {in[0]};
    return OkStatus();
  };
  SetPerElementFlops(&def, 2.0, 1.0);
  return def;
}

OpDef AllToAll() {
  OpDef def;
  def.name = "moe_all_to_all";
  def.min_inputs = def.max_inputs = 2;  // the buffer and the capacity
  def.exchange = true;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("moe_all_to_all", in, 2, 2));
    DS_RETURN_IF_ERROR(CheckRank("moe_all_to_all", "x", in[0], 3));
    DS_RETURN_IF_ERROR(CheckCapacity("moe_all_to_all", in[1]));
    *out = {in[0]};
    return OkStatus();
  };
  def.non_differentiable_inputs = 0b10;
  return def;
}

const bool kRegistered = RegisterOp(AllToAll()) && RegisterOp(Router()) && RegisterOp(Dispatch()) &&
                         RegisterOp(ExpertLinear()) && RegisterOp(Combine()) &&
                         RegisterOp(ResidualMix()) && RegisterOp(Loss());

}  // namespace
}  // namespace ds::kernels::ops
