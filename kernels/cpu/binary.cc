// The elementwise binary ops over two inputs of one shape, written once:
//   add: y = a + b (residual connections). da += dy, db += dy; backward reads neither input.
//   mul: y = a * b (SwiGLU's silu(gate) * up). da += dy b, db += dy a; backward reads both.
#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

struct Add {
  static constexpr bool kReadsOther = false;  // d(a + b)/da = 1
  static float Apply(float a, float b) { return a + b; }
  static float Grad(float dy, float) { return dy; }
};

struct Mul {
  static constexpr bool kReadsOther = true;  // d(a b)/da = b
  static float Apply(float a, float b) { return a * b; }
  static float Grad(float dy, float other) { return dy * other; }
};

template <class Op>
Status Forward(const OpArgs& args) {
  const float* a = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  ParallelFor(args.in[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = Op::Apply(a[i], b[i]);
  });
  return OkStatus();
}

template <class Op>
Status Backward(const OpArgs& args) {
  const float* dy = args.grad_out[0].f32();
  for (int k = 0; k < 2; ++k) {
    if (!args.grad_in[k].defined()) continue;
    float* d = args.grad_in[k].f32();
    const float* other = Op::kReadsOther ? args.in[1 - k].f32() : nullptr;
    ParallelFor(args.grad_out[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        d[i] += Op::Grad(dy[i], Op::kReadsOther ? other[i] : 0.f);
    });
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("add", Device::kCpu, DType::kF32, {Forward<Add>, Backward<Add>}) &&
    RegisterKernel("mul", Device::kCpu, DType::kF32, {Forward<Mul>, Backward<Mul>});

}  // namespace
}  // namespace ds::kernels::cpu
