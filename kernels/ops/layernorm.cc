// The layernorm op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("layernorm", in, 3, 3));
  DS_RETURN_IF_ERROR(CheckMinRank("layernorm", "x", in[0], 1));
  const char* names[] = {"x", "gamma", "beta"};
  for (int i = 0; i < 3; ++i) DS_RETURN_IF_ERROR(CheckFloat("layernorm", names[i], in[i]));
  const int64_t c = in[0].shape.back();
  for (int i = 1; i < 3; ++i)
    if (in[i].shape != Shape{c})
      return InvalidArgumentError(StrCat("layernorm: ", names[i], " has shape ",
                                         ShapeToString(in[i].shape), " but x has ", c,
                                         " channels"));
  if (!(attrs.Float("eps", 1e-5) > 0.0)) return InvalidArgumentError("layernorm: eps must be > 0");
  *out = {in[0]};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "layernorm";
  def.min_inputs = def.max_inputs = 3;
  def.attr_names = {"eps"};
  def.infer = Infer;
  def.saved = [](const Attrs&, const std::vector<TensorSpec>& in) {
    const int64_t n = LeadingRows(in[0].shape);
    return std::vector<TensorSpec>{{{n}, DType::kF32}, {{n}, DType::kF32}};
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 8.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 14.0 * in[0].numel();
  };
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
