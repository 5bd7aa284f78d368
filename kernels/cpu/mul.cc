// mul: y = a * b elementwise (same shape; SwiGLU's silu(gate) * up).
// da += dy * b, db += dy * a. Backward reads both inputs.
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const float* a = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] * b[i];
  });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const float* dy = args.grad_out[0].f32();
  for (int k = 0; k < 2; ++k) {
    if (!args.grad_in[k].defined()) continue;
    float* d = args.grad_in[k].f32();
    const float* other = args.in[1 - k].f32();
    ParallelFor(args.grad_out[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) d[i] += dy[i] * other[i];
    });
  }
  return OkStatus();
}

OpDef Def() {
  OpDef def;
  def.name = "mul";
  def.min_inputs = def.max_inputs = 2;
  def.infer = [](const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
    DS_RETURN_IF_ERROR(CheckArity("mul", in, 2, 2));
    return InferElementwise("mul", in, out);
  };
  def.forward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 1.0 * in[0].numel();
  };
  def.backward_flops = [](const Attrs&, const std::vector<TensorSpec>& in) {
    return 4.0 * in[0].numel();
  };
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered =
    RegisterOp(Def()) && RegisterKernel("mul", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
