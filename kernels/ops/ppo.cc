// The PPO loss ops' definitions (DeepSpeed-Chat's step 3), apart from their kernels
// (kernels/cpu/ppo.cc). Per position of a [B, T] batch, `mask` 1 on the answer's real tokens,
// 0 elsewhere; the losses are means over the masked positions.
//   ppo_actor_loss  logits [B, T, V], tokens int32 [B, T] (the token whose log-probability each
//                   position gives: the next one), old_logprobs, advantages, mask [B, T]
//                   -> [1] = sum m max(-A r, -A clip(r, 1 - c, 1 + c)) / sum m with
//                   r = exp((log softmax(logits)[token] - old) m); attr cliprange (0.2);
//                   an optional sixth input ptx [B, T] adds DeepSpeed-Chat's pretraining term
//                   sum w (-log softmax(logits)[token]) / #{w != 0}: with w = unsup_coef on a
//                   batch of plain text (mask 0) the step is unsup_coef x its LM loss
//   ppo_value_loss  values [B, T, 1], old_values, returns [B, T], mask int32 [B, T] (the
//                   critic's targets: it predicts no token)
//                   -> [1] = 0.5 sum m max((V - R)^2, (clip(V, V_old +- c) - R)^2) / sum m;
//                   attr cliprange_value (0.2)
// Gradients flow to the logits and the values only.
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

// The [B, T] fp32 inputs from `first` on.
Status CheckPerToken(const char* op, const std::vector<TensorSpec>& in, size_t first,
                     const Shape& bt) {
  for (size_t i = first; i < in.size(); ++i) {
    DS_RETURN_IF_ERROR(CheckFloat(op, "per-token input", in[i]));
    if (in[i].shape != bt)
      return InvalidArgumentError(StrCat(op, ": input ", i, " is ", ShapeToString(in[i].shape),
                                         ", not ", ShapeToString(bt)));
  }
  return OkStatus();
}

Status InferActor(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "ppo_actor_loss";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 5, 6));
  DS_RETURN_IF_ERROR(CheckRank(op, "logits", in[0], 3));
  DS_RETURN_IF_ERROR(CheckFloat(op, "logits", in[0]));
  DS_RETURN_IF_ERROR(CheckInt32(op, "tokens", in[1]));
  const Shape bt = {in[0].shape[0], in[0].shape[1]};
  if (in[1].shape != bt)
    return InvalidArgumentError(StrCat(op, ": tokens ", ShapeToString(in[1].shape), " for logits ",
                                       ShapeToString(in[0].shape)));
  DS_RETURN_IF_ERROR(CheckPerToken(op, in, 2, bt));
  *out = {TensorSpec{{1}, DType::kF32}};
  return OkStatus();
}

Status InferValue(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "ppo_value_loss";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 4, 4));
  DS_RETURN_IF_ERROR(CheckRank(op, "values", in[0], 3));
  DS_RETURN_IF_ERROR(CheckFloat(op, "values", in[0]));
  if (in[0].shape[2] != 1)
    return InvalidArgumentError(
        StrCat(op, ": values ", ShapeToString(in[0].shape), " must be [B, T, 1]"));
  const Shape bt = {in[0].shape[0], in[0].shape[1]};
  DS_RETURN_IF_ERROR(CheckPerToken(op, {in[0], in[1], in[2]}, 1, bt));
  DS_RETURN_IF_ERROR(CheckInt32(op, "mask", in[3]));
  if (in[3].shape != bt)
    return InvalidArgumentError(
        StrCat(op, ": mask ", ShapeToString(in[3].shape), ", not ", ShapeToString(bt)));
  *out = {TensorSpec{{1}, DType::kF32}};
  return OkStatus();
}

OpDef Actor() {
  OpDef def;
  def.name = "ppo_actor_loss";
  def.min_inputs = 5;
  def.max_inputs = 6;
  def.attr_names = {"cliprange"};
  def.infer = InferActor;
  // A log-softmax per row forward, and its gradient backward.
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_flops = def.forward_flops;
  def.backward_reads_inputs = 0b111111;
  def.non_differentiable_inputs = 0b111110;
  return def;
}

OpDef Value() {
  OpDef def;
  def.name = "ppo_value_loss";
  def.min_inputs = def.max_inputs = 4;
  def.attr_names = {"cliprange_value"};
  def.infer = InferValue;
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 8.0 * in[0].numel();
  };
  def.backward_flops = def.forward_flops;
  def.backward_reads_inputs = 0b1111;
  def.non_differentiable_inputs = 0b1110;
  return def;
}

const bool kRegistered = RegisterOp(Actor()) && RegisterOp(Value());

}  // namespace
}  // namespace ds::kernels::ops
