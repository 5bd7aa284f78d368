// relu, gelu_erf, scale and softcap (definitions: kernels/ops/pointwise.cc), elementwise over
// the flat tensor:
//   relu      y = max(x, 0);                       dx += dy [x > 0]
//   gelu_erf  y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
//                                                  dx += dy (Phi(x) + x phi(x))
//   scale     y = factor x;                        dx += factor dy
//   softcap   y = cap tanh(x / cap);               dx += dy (1 - (y / cap)^2)  (reads y)
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

float Attr(const OpArgs& args, const char* name) {
  return static_cast<float>(args.attrs ? args.attrs->Float(name, 0.0) : 0.0);
}

// y[i] = f(x[i]) over the flat tensors, in parallel.
template <class F>
void Map(int64_t n, F f) {
  ParallelFor(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

Status ReluForward(const OpArgs& args) {
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  Map(args.in[0].numel(), [&](int64_t i) { y[i] = x[i] > 0.f ? x[i] : 0.f; });
  return OkStatus();
}
Status ReluBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float* x = args.in[0].f32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  Map(args.in[0].numel(), [&](int64_t i) { dx[i] += x[i] > 0.f ? dy[i] : 0.f; });
  return OkStatus();
}

Status GeluErfForward(const OpArgs& args) {
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  Map(args.in[0].numel(),
      [&](int64_t i) { y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2)); });
  return OkStatus();
}
Status GeluErfBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float* x = args.in[0].f32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  Map(args.in[0].numel(), [&](int64_t i) {
    const float cdf = 0.5f * (1.f + std::erf(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    dx[i] += dy[i] * (cdf + x[i] * pdf);
  });
  return OkStatus();
}

Status ScaleForward(const OpArgs& args) {
  const float factor = Attr(args, "factor");
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  Map(args.in[0].numel(), [&](int64_t i) { y[i] = factor * x[i]; });
  return OkStatus();
}
Status ScaleBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float factor = Attr(args, "factor");
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  Map(args.grad_out[0].numel(), [&](int64_t i) { dx[i] += factor * dy[i]; });
  return OkStatus();
}

Status SoftcapForward(const OpArgs& args) {
  const float cap = Attr(args, "cap");
  if (!(cap > 0.f)) return InvalidArgumentError("softcap: cap must be > 0");
  const float* x = args.in[0].f32();
  float* y = args.out[0].f32();
  Map(args.in[0].numel(), [&](int64_t i) { y[i] = cap * std::tanh(x[i] / cap); });
  return OkStatus();
}
Status SoftcapBackward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  const float cap = Attr(args, "cap");
  const float* y = args.out[0].f32();
  const float* dy = args.grad_out[0].f32();
  float* dx = args.grad_in[0].f32();
  Map(args.grad_out[0].numel(), [&](int64_t i) {
    const float t = y[i] / cap;
    dx[i] += dy[i] * (1.f - t * t);
  });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("relu", Device::kCpu, DType::kF32, {ReluForward, ReluBackward}) &&
    RegisterKernel("gelu_erf", Device::kCpu, DType::kF32, {GeluErfForward, GeluErfBackward}) &&
    RegisterKernel("scale", Device::kCpu, DType::kF32, {ScaleForward, ScaleBackward}) &&
    RegisterKernel("softcap", Device::kCpu, DType::kF32, {SoftcapForward, SoftcapBackward});

}  // namespace
}  // namespace ds::kernels::cpu
