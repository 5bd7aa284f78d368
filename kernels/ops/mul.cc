// The mul op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

OpDef Def() {
  OpDef def;
  def.name = "mul";
  def.min_inputs = def.max_inputs = 2;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("mul", in, 2, 2));
    return InferElementwise("mul", in, out);
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 1.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
