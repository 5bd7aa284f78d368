// gelu: GPT-2's tanh approximation,
//   y = 0.5 x (1 + tanh(u)),  u = k (x + a x^3),  k = sqrt(2 / pi),  a = 0.044715.
// Since 1 + tanh(u) = 2 sigmoid(2u), we compute y = x s with s = 1 / (1 + exp(-2u)),
// which has no cancellation for large negative x and vectorizes through ExpArray.
//   dy/dx = s + x s (1 - s) 2 k (1 + 3 a x^2).
// Backward reads x; nothing is saved.
#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;

// z[i] = exp(-2u(x[i])) for m elements.
inline void ExpMinus2U(const float* x, float* z, int64_t m) {
  for (int64_t i = 0; i < m; ++i) z[i] = -2.f * kK * (x[i] + kA * x[i] * x[i] * x[i]);
  ExpArray(z, z, m);
}

Status Forward(const OpArgs& args) {
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      ExpMinus2U(x + c, z, m);
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
      ExpMinus2U(x + c, z, m);
      for (int64_t i = 0; i < m; ++i) {
        const float v = x[c + i];
        const float s = 1.f / (1.f + z[i]);
        const float du = 2.f * kK * (1.f + 3.f * kA * v * v);
        dx[c + i] += dy[c + i] * (s + v * s * (1.f - s) * du);
      }
    }
  });
  return OkStatus();
}

const bool kRegistered = RegisterKernel("gelu", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
