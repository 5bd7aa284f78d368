// Mixtral's MoE MLP names for the Llama family (hf_families.cc): our stacked expert tensors
// `layers.<i>.block_sparse_moe.experts.w1.weight` [E, F, C] (w3 the same, w2 [E, C, F]) are
// transformers' per-expert `model.layers.<i>.block_sparse_moe.experts.<j>.w1.weight` [F, C];
// the router `block_sparse_moe.gate.weight` [E, C] keeps its name.
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_internal.h"
#include "runtime/ckpt/tensor_ops.h"

namespace ds::ckpt::internal {
namespace {

constexpr const char* kMoe = "block_sparse_moe.";
constexpr const char* kExperts[] = {"w1", "w3", "w2"};

// Rows of one expert's slice: w1 / w3 [F, C], w2 [C, F].
Shape ExpertShape(const char* w, const Dims& d) {
  return std::string(w) == "w2" ? Shape{d.C, d.F} : Shape{d.F, d.C};
}

std::string HfExpert(const std::string& hp, int64_t j, const char* w) {
  return hp + kMoe + "experts." + std::to_string(j) + "." + w + ".weight";
}

}  // namespace

bool IsMoeLayer(const TensorSource& src, const std::string& prefix) {
  return src.Has(prefix + kMoe + "gate.weight");
}

int64_t MoeWidth(const TensorSource& src, const std::string& prefix, bool ours) {
  auto w1 = src.Peek(ours ? prefix + kMoe + "experts.w1.weight" : HfExpert(prefix, 0, "w1"));
  return w1.ok() ? Dim(*w1, ours ? 1 : 0) : 0;
}

Status MixtralToHf(TensorSource& src, const std::string& hp, const std::string& op, const Dims& d,
                   std::vector<OwnedNamedTensor>* out) {
  DS_ASSIGN_OR_RETURN(Tensor gate, src.Peek(op + kMoe + "gate.weight"));
  const int64_t experts = Dim(gate, 0);
  DS_ASSIGN_OR_RETURN(gate, src.Take(op + kMoe + "gate.weight", {experts, d.C}));
  DS_RETURN_IF_ERROR(Emit(hp + kMoe + "gate.weight", gate, false, src.dtype(), out));
  for (const char* w : kExperts) {
    const Shape one = ExpertShape(w, d);
    DS_ASSIGN_OR_RETURN(
        Tensor all, src.Take(op + kMoe + "experts." + w + ".weight", {experts, one[0], one[1]}));
    const Tensor rows(all.data(), {experts * one[0], one[1]}, all.dtype());
    for (int64_t j = 0; j < experts; ++j) {
      DS_ASSIGN_OR_RETURN(OwnedTensor part, SliceRows(rows, j * one[0], (j + 1) * one[0]));
      DS_RETURN_IF_ERROR(Emit(HfExpert(hp, j, w), part.view(), false, src.dtype(), out));
    }
  }
  return OkStatus();
}

Status MixtralFromHf(TensorSource& src, const std::string& hp, const std::string& op, const Dims& d,
                     std::vector<OwnedNamedTensor>* out) {
  DS_ASSIGN_OR_RETURN(Tensor gate, src.Peek(hp + kMoe + "gate.weight"));
  const int64_t experts = Dim(gate, 0);
  DS_ASSIGN_OR_RETURN(gate, src.Take(hp + kMoe + "gate.weight", {experts, d.C}));
  DS_RETURN_IF_ERROR(Emit(op + kMoe + "gate.weight", gate, false, src.dtype(), out));
  for (const char* w : kExperts) {
    const Shape one = ExpertShape(w, d);
    std::vector<Tensor> parts;
    for (int64_t j = 0; j < experts; ++j) {
      DS_ASSIGN_OR_RETURN(Tensor t, src.Take(HfExpert(hp, j, w), one));
      parts.push_back(t);
    }
    DS_ASSIGN_OR_RETURN(OwnedTensor stacked, ConcatRows(parts));
    const Tensor all(stacked.view().data(), {experts, one[0], one[1]}, stacked.view().dtype());
    DS_RETURN_IF_ERROR(Emit(op + kMoe + "experts." + w + ".weight", all, false, src.dtype(), out));
  }
  return OkStatus();
}

}  // namespace ds::ckpt::internal
