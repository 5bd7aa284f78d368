// The rmsnorm op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("rmsnorm", in, 2, 2));
  DS_RETURN_IF_ERROR(CheckMinRank("rmsnorm", "x", in[0], 1));
  DS_RETURN_IF_ERROR(CheckFloat("rmsnorm", "x", in[0]));
  DS_RETURN_IF_ERROR(CheckFloat("rmsnorm", "gamma", in[1]));
  const int64_t c = in[0].shape.back();
  if (in[1].shape != Shape{c})
    return InvalidArgumentError(StrCat("rmsnorm: gamma has shape ", ShapeToString(in[1].shape),
                                       " but x has ", c, " channels"));
  if (!(attrs.Float("eps", 1e-6) > 0.0)) return InvalidArgumentError("rmsnorm: eps must be > 0");
  *out = {in[0]};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "rmsnorm";
  def.min_inputs = def.max_inputs = 2;
  def.attr_names = {"eps"};
  def.infer = Infer;
  def.saved = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return std::vector<TensorSpec>{{{LeadingRows(in[0].shape)}, DType::kF32}};
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 10.0 * in[0].numel();
  };
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
