// The kv_attention op's definition: attention's forward for generation, the new tokens against a
// KV cache (kernels/cpu/kv_attention.cc), apart from its kernels.
//   qkv      [B, S, (H + 2 Hkv) D]  the new tokens' packed q, k, v heads (attention's layout)
//   k_cache  [B, Hkv, Tmax, D]      state the caller holds between calls (graph role kState);
//   v_cache  [B, Hkv, Tmax, D]      the new keys and values are written at slots
//                                   [start, start + S), in place
//   start    int32 [1]              the slot of the first new token: the batch is left-padded,
//                                   so every sequence's step t sits at the same slot
//   pad      int32 [B]              sequence b's first pad_b slots are padding, masked
//   -> out   [B, S, H D]: query i of sequence b attends slots [pad_b, start + i].
// Forward only (inference).
#include "kernels/attention_options.h"
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs& attrs, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  const char* op = "kv_attention";
  DS_RETURN_IF_ERROR(CheckArity(op, in, 5, 5));
  HeadLayout l;
  DS_RETURN_IF_ERROR(InferHeadLayout(op, attrs, in[0], &l));
  AttentionOptions options;
  DS_RETURN_IF_ERROR(ReadAttentionOptions(op, attrs, l.head_dim, &options));
  for (int i : {1, 2}) {
    DS_RETURN_IF_ERROR(CheckRank(op, i == 1 ? "k_cache" : "v_cache", in[i], 4));
    DS_RETURN_IF_ERROR(CheckFloat(op, i == 1 ? "k_cache" : "v_cache", in[i]));
    const Shape& c = in[i].shape;
    if (c[0] != l.batch || c[1] != l.n_kv_head || c[3] != l.head_dim || c[2] < l.seq)
      return InvalidArgumentError(StrCat(op, ": cache ", ShapeToString(c), " does not hold ",
                                         l.n_kv_head, " heads of ", l.head_dim, " for batch ",
                                         l.batch, " and ", l.seq, " new tokens"));
  }
  DS_RETURN_IF_ERROR(CheckInt32(op, "start", in[3]));
  DS_RETURN_IF_ERROR(CheckInt32(op, "pad", in[4]));
  if (in[3].shape != Shape{1} || in[4].shape != Shape{l.batch})
    return InvalidArgumentError(StrCat(op, ": start must be [1] and pad [", l.batch, "], got ",
                                       ShapeToString(in[3].shape), " and ",
                                       ShapeToString(in[4].shape)));
  *out = {TensorSpec{{l.batch, l.seq, l.n_head * l.head_dim}, in[0].dtype}};
  return OkStatus();
}

// QK^T and PV against every cached key: 4 B H S Tmax D at most (the cache's length).
double Flops(const Attrs& attrs, const std::vector<TensorSpec>& in) {
  HeadLayout l;
  if (!InferHeadLayout("kv_attention", attrs, in[0], &l).ok() || in[1].shape.size() != 4)
    return 0.0;
  return 4.0 * l.batch * l.n_head * static_cast<double>(l.seq) * in[1].shape[2] * l.head_dim;
}

OpDef Def() {
  OpDef def;
  def.name = "kv_attention";
  def.tp_rule = TpRule::kHeads;  // the rank's query heads and the kv heads they read
  def.min_inputs = def.max_inputs = 5;
  def.attr_names = {"n_head", "n_kv_head"};
  for (const std::string& a : AttentionOptionAttrNames()) def.attr_names.push_back(a);
  def.infer = Infer;
  def.forward_flops = Flops;
  def.non_differentiable_inputs = 0b11110;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
