// The reward_pair_loss op's definition: DeepSpeed-Chat's reward-model loss, apart from its
// kernels (kernels/cpu/reward.cc).
//   values  [B, T, 1] fp32  the value head's score at every position
//   ends    int32 [B, T]    1 at the position each sequence is scored at (its last non-pad
//                           token), 0 elsewhere: exactly one per row (checked when it runs)
//   -> loss [1] = mean over the pairs i < B/2 of -log sigmoid(r_i - r_{i + B/2}): rows
//      [0, B/2) are the chosen answers, [B/2, B) the rejected ones, pair by pair (an odd batch
//      is refused when it runs: graph validation infers shapes at any batch).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "reward_pair_loss";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 2, 2));
  DS_RETURN_IF_ERROR(CheckRank(op, "values", in[0], 3));
  DS_RETURN_IF_ERROR(CheckFloat(op, "values", in[0]));
  DS_RETURN_IF_ERROR(CheckInt32(op, "ends", in[1]));
  const Shape& v = in[0].shape;
  if (v[2] != 1 || in[1].shape != Shape{v[0], v[1]})
    return InvalidArgumentError(StrCat(op, ": values ", ShapeToString(v), " and ends ",
                                       ShapeToString(in[1].shape),
                                       " must be [B, T, 1] and [B, T]"));
  *out = {TensorSpec{{1}, DType::kF32}};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "reward_pair_loss";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = 2;
  def.infer = Infer;
  // A scan of the ends per position, a few operations per pair.
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return static_cast<double>(in[1].numel());
  };
  def.backward_flops = def.forward_flops;
  def.backward_reads_inputs = 0b11;
  def.non_differentiable_inputs = 0b10;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
