// head_rmsnorm: Qwen 3's q_norm and k_norm on packed qkv [B, T, (H + 2 Hkv) D]: every q head
// is RMS-normalized over its D values and scaled by q_weight [D], every k head by k_weight [D];
// v heads pass through. Attrs n_head, n_kv_head (as attention), eps. Saved: the rstd of each
// normalized head, fp32 [B T (H + Hkv)]. Its kernel: kernels/cpu/head_norm.cc.
// Tensor parallelism: by heads, as rope (TpRule::kHeads); the weights' gradients are each
// rank's heads' part of the sum, all-reduced over tp (parallel/tensor/tp_graph.cc, sp_params).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "head_rmsnorm";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 3, 3));
  HeadLayout l;
  DS_RETURN_IF_ERROR(InferHeadLayout(op, attrs, in[0], &l));
  for (int i = 1; i < 3; ++i) {
    DS_RETURN_IF_ERROR(CheckFloat(op, i == 1 ? "q_weight" : "k_weight", in[i]));
    if (in[i].shape != Shape{l.head_dim})
      return InvalidArgumentError(StrCat(op, ": ", i == 1 ? "q_weight" : "k_weight", " has shape ",
                                         ShapeToString(in[i].shape), " for heads of ", l.head_dim));
  }
  if (!(attrs.Float("eps", 1e-6) > 0.0))
    return InvalidArgumentError("head_rmsnorm: eps must be > 0");
  *out = {in[0]};
  return OkStatus();
}

std::vector<TensorSpec> Saved(const Attrs& attrs, const std::vector<TensorSpec>& in) {
  HeadLayout l;
  if (!InferHeadLayout("head_rmsnorm", attrs, in[0], &l).ok()) return {};
  return {TensorSpec{{l.batch * l.seq * (l.n_head + l.n_kv_head)}, DType::kF32}};
}

OpDef Def() {
  OpDef def;
  def.name = "head_rmsnorm";
  def.min_inputs = def.max_inputs = 3;
  def.tp_rule = TpRule::kHeads;
  def.attr_names = {"n_head", "n_kv_head", "eps"};
  def.infer = Infer;
  def.saved = Saved;
  SetPerElementFlops(&def, 4.0, 10.0);
  def.backward_reads_inputs = 0b111;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
