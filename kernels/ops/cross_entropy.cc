// The cross_entropy op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("cross_entropy", in, 2, 2));
  DS_RETURN_IF_ERROR(CheckMinRank("cross_entropy", "logits", in[0], 1));
  DS_RETURN_IF_ERROR(CheckFloat("cross_entropy", "logits", in[0]));
  DS_RETURN_IF_ERROR(CheckInt32("cross_entropy", "targets", in[1]));
  const Shape lead(in[0].shape.begin(), in[0].shape.end() - 1);
  if (in[1].shape != lead)
    return InvalidArgumentError(StrCat("cross_entropy: targets have shape ",
                                       ShapeToString(in[1].shape), " but logits ",
                                       ShapeToString(in[0].shape), " need ", ShapeToString(lead)));
  *out = {TensorSpec{{1}, DType::kF32}};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "cross_entropy";
  def.host_bf16 = {1u, 0u, 1u, 0u, true};  // the logits, their gradient
  def.tp_rule = TpRule::kCrossEntropy;
  def.min_inputs = def.max_inputs = 2;
  def.attr_names = {"ignore_index"};
  def.infer = Infer;
  def.saved = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return std::vector<TensorSpec>{{{LeadingRows(in[0].shape)}, DType::kF32}};
  };
  // max, subtract, exp, sum per logit; backward: subtract, exp, scale-add.
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  def.non_differentiable_inputs = 1u << 1;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
