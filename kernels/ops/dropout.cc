// The dropout op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

OpDef Def() {
  OpDef def;
  def.name = "dropout";
  def.tp_rule = TpRule::kElementwise;
  def.attr_names = {"p"};
  def.infer = [](const Attrs& attrs, const std::vector<TensorSpec>& in,
                 std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("dropout", in, 1, 1));
    const double p = attrs.Float("p", 0.0);
    if (!(p >= 0.0 && p < 1.0))
      return InvalidArgumentError(StrCat("dropout: p must be in [0, 1), got ", p));
    return InferElementwise("dropout", in, out);
  };
  SetPerElementFlops(&def, 1.0, 2.0);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
