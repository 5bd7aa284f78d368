// The gated activations y = x s(x), with s a sigmoid, written once over the exponent each
// computes (ExpArray vectorizes it) and its derivative:
//   gelu (GPT-2's tanh approximation): y = 0.5 x (1 + tanh(u)),  u = k (x + a x^3),
//     k = sqrt(2 / pi), a = 0.044715. Since 1 + tanh(u) = 2 sigmoid(2u), y = x s with
//     s = 1 / (1 + exp(-2u)), which has no cancellation for large negative x.
//     dy/dx = s + x s (1 - s) 2 k (1 + 3 a x^2).
//   silu (swish): y = x s, s = sigmoid(x) = 1 / (1 + exp(-x)).  dy/dx = s (1 + x (1 - s)).
// Backward reads x; nothing is saved.
#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

struct Gelu {
  static constexpr float kK = 0.7978845608028654f;  // sqrt(2 / pi)
  static constexpr float kA = 0.044715f;
  // The argument of exp in s = 1 / (1 + exp(.)).
  static float Exponent(float x) { return -2.f * kK * (x + kA * x * x * x); }
  // dy dy/dx, given s.
  static float Grad(float dy, float x, float s) {
    const float du = 2.f * kK * (1.f + 3.f * kA * x * x);
    return dy * (s + x * s * (1.f - s) * du);
  }
};

struct Silu {
  static float Exponent(float x) { return -x; }
  static float Grad(float dy, float x, float s) { return dy * s * (1.f + x * (1.f - s)); }
};

// z[i] = exp(Exponent(x[i])) for m elements.
template <class Act>
inline void ExpOf(const float* x, float* z, int64_t m) {
  for (int64_t i = 0; i < m; ++i) z[i] = Act::Exponent(x[i]);
  ExpArray(z, z, m);
}

template <class Act>
Status Forward(const OpArgs& args) {
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      ExpOf<Act>(x + c, z, m);
      for (int64_t i = 0; i < m; ++i) y[c + i] = x[c + i] / (1.f + z[i]);
    }
  });
  return OkStatus();
}

template <class Act>
Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float* x = args.in[0].f32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      ExpOf<Act>(x + c, z, m);
      for (int64_t i = 0; i < m; ++i) {
        const float s = 1.f / (1.f + z[i]);
        dx[c + i] += Act::Grad(dy[c + i], x[c + i], s);
      }
    }
  });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("gelu", Device::kCpu, DType::kF32, {Forward<Gelu>, Backward<Gelu>}) &&
    RegisterKernel("silu", Device::kCpu, DType::kF32, {Forward<Silu>, Backward<Silu>});

}  // namespace
}  // namespace ds::kernels::cpu
