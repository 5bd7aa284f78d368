// The embedding op's definition (shape inference, FLOPs, saved activations), apart from its
// kernels: what the planner and graph validation read (kernels/registry.h FindOp).
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("embedding", in, 2, 2));
  DS_RETURN_IF_ERROR(CheckInt32("embedding", "ids", in[0]));
  DS_RETURN_IF_ERROR(CheckRank("embedding", "weight", in[1], 2));
  DS_RETURN_IF_ERROR(CheckFloat("embedding", "weight", in[1]));
  Shape shape = in[0].shape;
  shape.push_back(in[1].shape[1]);
  *out = {TensorSpec{shape, in[1].dtype}};
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "embedding";
  def.tp_rule = TpRule::kEmbedding;
  def.min_inputs = def.max_inputs = 2;
  // Vocab-parallel (tensor parallelism): the weight holds rows [vocab_start, vocab_start + V_local)
  // of a vocabulary of vocab_size; other ids give zero rows (the ranks' outputs are summed).
  def.attr_names = {"vocab_start", "vocab_size"};
  def.infer = Infer;
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 0.0;  // a gather
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return static_cast<double>(in[0].numel()) * in[1].shape[1];
  };
  def.backward_reads_inputs = 1u << 0;
  def.non_differentiable_inputs = 1u << 0;
  return def;
}

const bool kRegistered = RegisterOp(Def());

}  // namespace
}  // namespace ds::kernels::ops
