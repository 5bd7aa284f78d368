// The attention op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/attention_options.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("attention", in, 1, 2));
  HeadLayout l;
  DS_RETURN_IF_ERROR(InferHeadLayout("attention", attrs, in[0], &l));
  AttentionOptions options;
  DS_RETURN_IF_ERROR(ReadAttentionOptions("attention", attrs, l.head_dim, &options));
  if (in.size() > 1) {
    DS_RETURN_IF_ERROR(CheckInt32("attention", "pad", in[1]));
    if (in[1].shape != Shape{l.batch} && in[1].shape != Shape{l.batch, l.seq})
      return InvalidArgumentError(
          StrCat("attention: pad must be [", l.batch, "] (left pads per sequence) or [", l.batch,
                 ", ", l.seq, "] (each token's document start), got ", ShapeToString(in[1].shape)));
  }
  *out = {TensorSpec{{l.batch, l.seq, l.n_head * l.head_dim}, in[0].dtype}};
  return OkStatus();
}

// Causal: each of QK^T and PV is 2 T^2 D / 2 per (b, h), so 4 B H T^2 D / 2 in all
// (softmax not counted).
double ForwardFlops(const Attrs& attrs, const std::vector<TensorSpec>& in) {
  HeadLayout l;
  if (!InferHeadLayout("attention", attrs, in[0], &l).ok()) return 0.0;
  return 4.0 * l.batch * l.n_head * static_cast<double>(l.seq) * l.seq * l.head_dim / 2;
}

// Five GEMMs of the same size (S recomputed, dP, dQ, dK, dV): 2.5x forward.
double BackwardFlops(const Attrs& attrs, const std::vector<TensorSpec>& in) {
  return 2.5 * ForwardFlops(attrs, in);
}

OpDef Def() {
  OpDef def;
  def.name = "attention";
  def.host_bf16 = {1u, 1u, 0u, 0u, false};  // qkv, out
  // qkv, and optionally pad int32 [B] (left pads) or int32 [B, T] (each token's document start:
  // packed documents), kernels/cpu/attention.cc.
  def.max_inputs = 2;
  def.non_differentiable_inputs = 1u << 1;
  def.tp_rule = TpRule::kHeads;
  def.attr_names = {"n_head", "n_kv_head"};
  for (const std::string& a : AttentionOptionAttrNames()) def.attr_names.push_back(a);
  def.infer = Infer;
  def.saved = [](const Attrs& attrs, const std::vector<TensorSpec>& in) {
    HeadLayout l;
    if (!InferHeadLayout("attention", attrs, in[0], &l).ok()) return std::vector<TensorSpec>{};
    return std::vector<TensorSpec>{{{l.batch, l.n_head, l.seq}, DType::kF32}};
  };
  def.forward_flops = ForwardFlops;
  def.backward_flops = BackwardFlops;
  def.backward_reads_inputs = 0b11;
  def.backward_reads_outputs = 1u << 0;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
