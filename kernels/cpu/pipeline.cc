// The pipeline ops' CPU kernels (definitions: kernels/ops/pipeline.cc): pipe_recv does nothing
// (the plan's RECV writes its output, and its gradient is what the stage sends back);
// pipe_send's forward writes the stage's loss 0 and its backward adds each received gradient
// g_i into dx_i.
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Nothing(const OpArgs&) { return OkStatus(); }

Status SendForward(const OpArgs& args) {
  args.out[0].f32()[0] = 0.0f;
  return OkStatus();
}

Status SendBackward(const OpArgs& args) {
  for (size_t i = 0; i + 1 < args.in.size(); i += 2) {
    if (!args.grad_in[i].defined()) continue;
    const int64_t n = args.in[i].numel();
    const float* g = args.in[i + 1].f32();
    float* dx = args.grad_in[i].f32();
    ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) dx[j] += g[j];
    });
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("pipe_recv", Device::kCpu, DType::kF32, {Nothing, Nothing}) &&
    RegisterKernel("pipe_send", Device::kCpu, DType::kF32, {SendForward, SendBackward});

}  // namespace
}  // namespace ds::kernels::cpu
