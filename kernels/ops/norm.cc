// The normalization ops' definitions, one table: layernorm (x, gamma, beta) and rmsnorm
// (x, gamma) over the last dimension, `eps` > 0, fp32 per-row statistics saved for backward
// (layernorm: mean and rstd; rmsnorm: rstd). Their kernels: kernels/cpu/{layernorm,rmsnorm}.cc
// and kernels/cuda.
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

struct Norm {
  const char* name;
  int inputs;  // x and its per-channel parameters
  double default_eps;
  int saved_per_row;     // fp32 statistics per row
  double forward_flops;  // per element
  double backward_flops;
};

constexpr Norm kOps[] = {
    {"layernorm", 3, 1e-5, 2, 8.0, 14.0},
    {"rmsnorm", 2, 1e-6, 1, 4.0, 10.0},
};

Status Infer(const Norm& n, const Attrs& attrs, const std::vector<TensorSpec>& in,
             std::vector<TensorSpec>* out) {
  static const char* kNames[] = {"x", "gamma", "beta"};
  DS_RETURN_IF_ERROR(CheckArity(n.name, in, n.inputs, n.inputs));
  DS_RETURN_IF_ERROR(CheckMinRank(n.name, "x", in[0], 1));
  for (int i = 0; i < n.inputs; ++i) DS_RETURN_IF_ERROR(CheckFloat(n.name, kNames[i], in[i]));
  const int64_t c = in[0].shape.back();
  for (int i = 1; i < n.inputs; ++i)
    if (in[i].shape != Shape{c})
      return InvalidArgumentError(StrCat(n.name, ": ", kNames[i], " has shape ",
                                         ShapeToString(in[i].shape), " but x has ", c,
                                         " channels"));
  if (!(attrs.Float("eps", n.default_eps) > 0.0))
    return InvalidArgumentError(StrCat(n.name, ": eps must be > 0"));
  *out = {in[0]};
  return OkStatus();
}

OpDef Def(const Norm& n) {
  OpDef def;
  def.name = n.name;
  def.host_bf16 = {0u, 1u, 0u, 1u, false};  // y and dy (x, the residual stream, stays fp32)
  def.tp_rule = TpRule::kReplicated;
  def.min_inputs = def.max_inputs = n.inputs;
  def.attr_names = {"eps"};
  if (n.name == std::string("rmsnorm")) def.attr_names.push_back("unit_offset");
  def.infer = [n](const Attrs& attrs, const std::vector<TensorSpec>& in,
                  std::vector<TensorSpec>* out) { return Infer(n, attrs, in, out); };
  def.saved = [n](const Attrs&, const std::vector<TensorSpec>& in) {
    const int64_t rows = LeadingRows(in[0].shape);
    return std::vector<TensorSpec>(n.saved_per_row, TensorSpec{{rows}, DType::kF32});
  };
  SetPerElementFlops(&def, n.forward_flops, n.backward_flops);
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

bool RegisterAll() {
  for (const Norm& n : kOps) RegisterOp(Def(n));
  return true;
}

const bool kRegistered = RegisterAll();

}  // namespace
}  // namespace ds::kernels::ops
