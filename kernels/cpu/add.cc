// add: y = a + b (same shape; residual connections). da += dy, db += dy.
// Backward reads neither input.
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const float* a = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const float* dy = args.grad_out[0].f32();
  for (int k = 0; k < 2; ++k) {
    if (!args.grad_in[k].defined()) continue;
    float* d = args.grad_in[k].f32();
    ParallelFor(args.grad_out[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) d[i] += dy[i];
    });
  }
  return OkStatus();
}

const bool kRegistered = RegisterKernel("add", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
