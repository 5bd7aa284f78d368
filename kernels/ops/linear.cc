// The linear op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("linear", in, 2, 3));
  DS_RETURN_IF_ERROR(CheckMinRank("linear", "x", in[0], 1));
  DS_RETURN_IF_ERROR(CheckRank("linear", "W", in[1], 2));
  DS_RETURN_IF_ERROR(CheckFloat("linear", "x", in[0]));
  DS_RETURN_IF_ERROR(CheckFloat("linear", "W", in[1]));
  const int64_t features = in[0].shape.back();
  if (features != in[1].shape[1])
    return InvalidArgumentError(
        StrCat("linear: x has ", features, " features but W expects ", in[1].shape[1]));
  if (in.size() == 3) {
    DS_RETURN_IF_ERROR(CheckFloat("linear", "b", in[2]));
    if (in[2].shape != Shape{in[1].shape[0]})
      return InvalidArgumentError(StrCat("linear: b has shape ", ShapeToString(in[2].shape),
                                         " but W has ", in[1].shape[0], " outputs"));
  }
  Shape shape = in[0].shape;
  shape.back() = in[1].shape[0];
  *out = {TensorSpec{shape, in[0].dtype}};
  return OkStatus();
}

// 2 N in out for the GEMM, plus N out for the bias.
double ForwardFlops(const Attrs&, const std::vector<TensorSpec>& in) {
  const double n = LeadingRows(in[0].shape), k = in[1].shape[1], m = in[1].shape[0];
  return 2.0 * n * k * m + (in.size() > 2 ? n * m : 0.0);
}

// Two GEMMs (dx, dW), plus N out for db.
double BackwardFlops(const Attrs&, const std::vector<TensorSpec>& in) {
  const double n = LeadingRows(in[0].shape), k = in[1].shape[1], m = in[1].shape[0];
  return 4.0 * n * k * m + (in.size() > 2 ? n * m : 0.0);
}

OpDef Def() {
  OpDef def;
  def.name = "linear";
  def.host_bf16 = {1u, 1u, 1u, 1u, true};  // x, y, dx, dy
  def.tp_rule = TpRule::kLinear;
  def.min_inputs = 2;
  def.max_inputs = 3;
  def.infer = Infer;
  def.forward_flops = ForwardFlops;
  def.backward_flops = BackwardFlops;
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
