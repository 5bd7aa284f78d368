// The rope op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/rope_freqs.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("rope", in, 1, 2));
  HeadLayout l;
  DS_RETURN_IF_ERROR(InferHeadLayout("rope", attrs, in[0], &l));
  if (in.size() == 2) {  // each token's position (generation: left padding, a KV cache)
    DS_RETURN_IF_ERROR(CheckInt32("rope", "positions", in[1]));
    if (in[1].shape != Shape{l.batch, l.seq} && in[1].shape != Shape{l.batch})
      return InvalidArgumentError(StrCat("rope: positions have shape ", ShapeToString(in[1].shape),
                                         " for qkv ", ShapeToString(in[0].shape)));
  }
  if (l.head_dim % 2 != 0)
    return InvalidArgumentError(StrCat("rope: head dim ", l.head_dim, " must be even"));
  RopeParams params;
  DS_RETURN_IF_ERROR(ReadRopeParams(attrs, l.head_dim, &params));
  *out = {in[0]};
  return OkStatus();
}

// 3 flops per rotated element (2 multiplies, 1 add); v is a copy.
double Flops(const Attrs& attrs, const std::vector<TensorSpec>& in) {
  HeadLayout l;
  if (!InferHeadLayout("rope", attrs, in[0], &l).ok()) return 0.0;
  return 3.0 * l.batch * l.seq * (l.n_head + l.n_kv_head) * l.head_dim;
}

OpDef Def() {
  OpDef def;
  def.name = "rope";
  def.tp_rule = TpRule::kHeads;
  def.max_inputs = 2;  // qkv [, positions int32 [B, T], or pad int32 [B]: a left-padded batch]
  def.non_differentiable_inputs = 1u << 1;
  def.attr_names = {"n_head", "n_kv_head", "position_chunk"};
  for (const std::string& a : RopeParamAttrNames()) def.attr_names.push_back(a);
  def.infer = Infer;
  def.forward_flops = Flops;
  def.backward_flops = Flops;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
