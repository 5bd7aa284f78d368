// silu (swish): y = x s, s = sigmoid(x) = 1 / (1 + exp(-x)).
//   dy/dx = s (1 + x (1 - s)).
// Backward reads x; nothing is saved.
#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

// z[i] = exp(-x[i]) for m elements.
inline void ExpMinus(const float* x, float* z, int64_t m) {
  for (int64_t i = 0; i < m; ++i) z[i] = -x[i];
  ExpArray(z, z, m);
}

Status Forward(const OpArgs& args) {
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      ExpMinus(x + c, z, m);
      for (int64_t i = 0; i < m; ++i) y[c + i] = x[c + i] / (1.f + z[i]);
    }
  });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float* x = args.in[0].f32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      ExpMinus(x + c, z, m);
      for (int64_t i = 0; i < m; ++i) {
        const float s = 1.f / (1.f + z[i]);
        dx[c + i] += dy[c + i] * s * (1.f + x[c + i] * (1.f - s));
      }
    }
  });
  return OkStatus();
}

const bool kRegistered = RegisterKernel("silu", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
