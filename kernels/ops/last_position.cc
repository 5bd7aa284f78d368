// The last_position op's definition: generation's prefill needs the next-token logits of each
// sequence's last position only, so the decode graph (runtime/planner/decode_graph.h) takes
//   x [B, T, C] -> out [B, 1, C] = x[:, T - 1, :]
// before the vocabulary projection, which then runs on B rows instead of B T. Forward only.
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

OpDef Def() {
  OpDef def;
  def.name = "last_position";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = 1;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("last_position", in, 1, 1));
    DS_RETURN_IF_ERROR(CheckRank("last_position", "x", in[0], 3));
    *out = {TensorSpec{{in[0].shape[0], 1, in[0].shape[2]}, in[0].dtype}};
    return OkStatus();
  };
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
