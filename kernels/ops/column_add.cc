// column_add: y = x, then y[..., begin : begin + w] += scale * d, with x [..., n] and d [..., w]
// over the same leading dimensions (begin + w <= n). LoRA's adapter output joins its base linear
// this way (runtime/graph/lora.h): the whole output (begin 0, w = n), or the rows of one module
// of a fused weight (Llama's q_proj and v_proj inside our fused attn.qkv). Backward: dx += dy,
// dd += scale * dy[..., begin : begin + w]; it reads no input. Its kernel:
// kernels/cpu/column_add.cc. Not partitioned by tensor parallelism (TpRule::kNone).
#include <algorithm>

#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

OpDef Def() {
  OpDef def;
  def.name = "column_add";
  def.min_inputs = def.max_inputs = 2;
  def.attr_names = {"begin", "scale"};
  def.infer = [](const Attrs& attrs, const std::vector<TensorSpec>& in,
                 std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("column_add", in, 2, 2));
    DS_RETURN_IF_ERROR(CheckMinRank("column_add", "x", in[0], 1));
    DS_RETURN_IF_ERROR(CheckFloat("column_add", "x", in[0]));
    DS_RETURN_IF_ERROR(CheckFloat("column_add", "d", in[1]));
    const Shape& x = in[0].shape;
    const Shape& d = in[1].shape;
    if (d.size() != x.size() || !std::equal(x.begin(), x.end() - 1, d.begin()))
      return InvalidArgumentError(StrCat("column_add: d has shape ", ShapeToString(d), ", x has ",
                                         ShapeToString(x), ": the leading dimensions differ"));
    const int64_t begin = attrs.Int("begin", 0);
    if (begin < 0 || begin + d.back() > x.back())
      return InvalidArgumentError(StrCat("column_add: columns [", begin, ", ", begin + d.back(),
                                         ") are outside x's ", x.back()));
    *out = {in[0]};
    return OkStatus();
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 2.0 * in[1].numel();  // one multiply-add per column added
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return static_cast<double>(in[0].numel() + 2 * in[1].numel());
  };
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
