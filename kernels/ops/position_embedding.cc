// The position_embedding op's definition (shape inference, FLOPs, saved activations), apart from
// its kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& a, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "position_embedding";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 2, 3));
  DS_RETURN_IF_ERROR(CheckRank(op, "x", in[0], 3));
  DS_RETURN_IF_ERROR(CheckRank(op, "wpe", in[1], 2));
  DS_RETURN_IF_ERROR(CheckFloat(op, "x", in[0]));
  DS_RETURN_IF_ERROR(CheckFloat(op, "wpe", in[1]));
  if (in[0].shape[2] != in[1].shape[1])
    return InvalidArgumentError(
        StrCat(op, ": x has ", in[0].shape[2], " channels but wpe has ", in[1].shape[1]));
  if (in.size() == 3) {  // each token's position (generation: left padding, a KV cache)
    DS_RETURN_IF_ERROR(CheckInt32(op, "positions", in[2]));
    if (in[2].shape != Shape{in[0].shape[0], in[0].shape[1]} &&
        in[2].shape != Shape{in[0].shape[0]})
      return InvalidArgumentError(StrCat(op, ": positions have shape ", ShapeToString(in[2].shape),
                                         " for x ", ShapeToString(in[0].shape)));
    *out = {in[0]};
    return OkStatus();
  }
  if (a.Int("offset", 0) < 0) return InvalidArgumentError(StrCat(op, ": offset must be >= 0"));
  const int64_t offset = a.Int("position_chunk", 0) * in[0].shape[1] + a.Int("offset", 0);
  if (offset < 0 || offset + in[0].shape[1] > in[1].shape[0])
    return InvalidArgumentError(StrCat(op, ": sequence length T=", in[0].shape[1],
                                       " from position ", offset, " exceeds the ", in[1].shape[0],
                                       " positions of wpe (maxT)"));
  *out = {in[0]};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "position_embedding";
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = 2;
  // x, wpe [, positions int32 [B, T]: token (b, t) at positions[b, t], or pad int32 [B]: at
  // t - pad[b], a left-padded batch]
  def.max_inputs = 3;
  def.non_differentiable_inputs = 1u << 2;
  def.infer = Infer;
  // position_chunk k: the positions are k T .. (k + 1) T - 1 (Ulysses: a rank's chunk).
  // offset: position p reads row p + offset (OPT's table starts at row 2).
  def.attr_names = {"position_chunk", "offset"};
  SetPerElementFlops(&def, 1.0, 2.0);
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
