// The elementwise ops' definitions, one table: every input float and of one shape, one output
// like the first input; FLOPs per element; the inputs backward reads. Their kernels:
// kernels/cpu/{add,mul,gelu,silu}.cc and kernels/cuda.
#include "kernels/registry.h"
#include "kernels/shape_check.h"
#include "runtime/base/status_macros.h"

namespace ds::kernels::ops {
namespace {

struct Elementwise {
  const char* name;
  int inputs;
  double forward_flops;   // per output element
  double backward_flops;  // per output element
  uint32_t backward_reads_inputs;
  HostBf16 host_bf16;  // kernels/cpu/binary.cc, activation.cc
};

constexpr Elementwise kOps[] = {
    {"add", 2, 1.0, 2.0, 0, {3u, 1u, 3u, 1u, true}},                      // da = db = dy
    {"mul", 2, 1.0, 4.0, (1u << 0) | (1u << 1), {3u, 1u, 3u, 1u, true}},  // da = dy b, db = dy a
    {"gelu", 1, 12.0, 20.0, 1u << 0, {1u, 1u, 1u, 1u, true}},             // tanh approximation
    {"silu", 1, 5.0, 10.0, 1u << 0, {1u, 1u, 1u, 1u, true}},
};

OpDef Def(const Elementwise& e) {
  OpDef def;
  def.name = e.name;
  def.tp_rule = TpRule::kElementwise;
  def.min_inputs = def.max_inputs = e.inputs;
  const std::string name = e.name;
  const int inputs = e.inputs;
  def.infer = [name, inputs](const Attrs&, const std::vector<TensorSpec>& in,
                             std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity(name.c_str(), in, inputs, inputs));
    return InferElementwise(name.c_str(), in, out);
  };
  SetPerElementFlops(&def, e.forward_flops, e.backward_flops);
  def.backward_reads_inputs = e.backward_reads_inputs;
  def.host_bf16 = e.host_bf16;
  return def;
}

bool RegisterAll() {
  for (const Elementwise& e : kOps) RegisterOp(Def(e));
  return true;
}

const bool kRegistered = RegisterAll();

}  // namespace
}  // namespace ds::kernels::ops
