// The one-input pointwise ops of the Hugging Face families, beside elementwise.cc's table: one
// float input, one output like it, FLOPs per element. Their kernels: kernels/cpu/pointwise.cc.
//   relu      OPT's MLP
//   gelu_erf  the exact GELU, x Phi(x) (GPT-NeoX's "gelu"); gelu is GPT-2's tanh form
//   scale     y = factor x (Gemma's embedding scale sqrt(hidden)); attr factor
//   softcap   y = cap tanh(x / cap) (Gemma 2's final logits); attr cap > 0
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

struct Pointwise {
  const char* name;
  const char* attr;  // its one attribute, or nullptr
  double forward_flops, backward_flops;
  uint32_t backward_reads_inputs, backward_reads_outputs;
};

constexpr Pointwise kOps[] = {
    {"relu", nullptr, 1.0, 1.0, 1u << 0, 0},
    {"gelu_erf", nullptr, 10.0, 14.0, 1u << 0, 0},
    {"scale", "factor", 1.0, 1.0, 0, 0},
    {"softcap", "cap", 4.0, 3.0, 0, 1u << 0},
};

OpDef Def(const Pointwise& p) {
  OpDef def;
  def.name = p.name;
  def.tp_rule = TpRule::kElementwise;
  def.min_inputs = def.max_inputs = 1;
  if (p.attr) def.attr_names = {p.attr};
  const std::string name = p.name;
  def.infer = [name](const Attrs& a, const std::vector<TensorSpec>& in,
                     std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity(name.c_str(), in, 1, 1));
    if (name == "softcap" && !(a.Float("cap", 0.0) > 0.0))
      return InvalidArgumentError("softcap: cap must be > 0");
    if (name == "scale" && !a.Has("factor"))
      return InvalidArgumentError("scale: the factor attribute is required");
    return InferElementwise(name.c_str(), in, out);
  };
  SetPerElementFlops(&def, p.forward_flops, p.backward_flops);
  def.backward_reads_inputs = p.backward_reads_inputs;
  def.backward_reads_outputs = p.backward_reads_outputs;
  return def;
}

bool RegisterAll() {
  for (const Pointwise& p : kOps) RegisterOp(Def(p));
  return true;
}

const bool kRegistered = RegisterAll();

}  // namespace
}  // namespace ds::kernels::ops
