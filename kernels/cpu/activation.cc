// The gated activations y = x s(x), with s a sigmoid, written once over the exponent each
// computes (ExpArray vectorizes it) and its derivative:
//   gelu (GPT-2's tanh approximation): y = 0.5 x (1 + tanh(u)),  u = k (x + a x^3),
//     k = sqrt(2 / pi), a = 0.044715. Since 1 + tanh(u) = 2 sigmoid(2u), y = x s with
//     s = 1 / (1 + exp(-2u)), which has no cancellation for large negative x.
//     dy/dx = s + x s (1 - s) 2 k (1 + 3 a x^2).
//   silu (swish): y = x s, s = sigmoid(x) = 1 / (1 + exp(-x)).  dy/dx = s (1 + x (1 - s)).
// Backward reads x; nothing is saved. x and y may be bf16 activations (act_io.h), and dy and a
// fresh dx (OpArgs::fresh_grads: written, not added) bf16 gradients.
#include <algorithm>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

struct Gelu {
  static constexpr const char* kName = "gelu";
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
  static constexpr const char* kName = "silu";
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
  const Tensor& xt = args.in[0];
  const Tensor& yt = args.out[0];
  ParallelFor(xt.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk], xb[kChunk], yb[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* x = ActRead(xt, c, m, xb);
      float* y = ActOut(yt, c, yb);
      ExpOf<Act>(x, z, m);
      for (int64_t i = 0; i < m; ++i) y[i] = x[i] / (1.f + z[i]);
      ActStore(yt, c, m, y);
    }
  });
  return OkStatus();
}

template <class Act>
Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const Tensor& xt = args.in[0];
  const Tensor& dyt = args.grad_out[0];
  const Tensor& dxt = args.grad_in[0];
  const bool fresh = args.fresh_grads & 1u;
  DS_RETURN_IF_ERROR(CheckBf16GradFresh(args, 0, Act::kName));
  ParallelFor(xt.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float z[kChunk], xb[kChunk], dyb[kChunk], dxb[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* x = ActRead(xt, c, m, xb);
      const float* dy = ActRead(dyt, c, m, dyb);
      float* dx = ActOut(dxt, c, dxb);
      ExpOf<Act>(x, z, m);
      for (int64_t i = 0; i < m; ++i) {
        const float g = Act::Grad(dy[i], x[i], 1.f / (1.f + z[i]));
        dx[i] = fresh ? g : dx[i] + g;
      }
      ActStore(dxt, c, m, dx);
    }
  });
  return OkStatus();
}

template <class Act>
Kernel MakeKernel() {
  Kernel k{Forward<Act>, Backward<Act>};
  k.bf16_act_inputs = k.bf16_act_outputs = 1u;
  k.bf16_grad_inputs = k.bf16_grad_outputs = 1u;
  k.overwrites_fresh_grads = true;
  return k;
}

const bool kRegistered = RegisterKernel("gelu", Device::kCpu, DType::kF32, MakeKernel<Gelu>()) &&
                         RegisterKernel("silu", Device::kCpu, DType::kF32, MakeKernel<Silu>());

}  // namespace
}  // namespace ds::kernels::cpu
