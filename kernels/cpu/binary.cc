// The elementwise binary ops over two inputs of one shape, written once:
//   add: y = a + b (residual connections). da += dy, db += dy; backward reads neither input.
//   mul: y = a * b (SwiGLU's silu(gate) * up). da += dy b, db += dy a; backward reads both.
// a, b and y may be bf16 activations (act_io.h), dy and fresh gradients bf16 ones.
#include <algorithm>

#include "kernels/cpu/act_io.h"
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
  const Tensor& at = args.in[0];
  const Tensor& bt = args.in[1];
  const Tensor& yt = args.out[0];
  if (!IsBf16(at) && !IsBf16(bt) && !IsBf16(yt)) {
    const float* a = at.f32();
    const float* b = bt.f32();
    float* y = yt.f32();
    ParallelFor(at.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = Op::Apply(a[i], b[i]);
    });
    return OkStatus();
  }
  ParallelFor(at.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float ab[kChunk], bb[kChunk], yb[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* a = ActRead(at, c, m, ab);
      const float* b = ActRead(bt, c, m, bb);
      float* y = ActOut(yt, c, yb);
      for (int64_t i = 0; i < m; ++i) y[i] = Op::Apply(a[i], b[i]);
      ActStore(yt, c, m, y);
    }
  });
  return OkStatus();
}

// d += g, or d = g where the gradient is fresh (OpArgs::fresh_grads); dy and a fresh d may be
// bf16. One pass over dy writes both gradients, a chunk at a time.
template <class Op>
Status Backward(const OpArgs& args) {
  const Tensor& dyt = args.grad_out[0];
  for (int k = 0; k < 2; ++k)
    if (args.grad_in[k].defined()) DS_RETURN_IF_ERROR(CheckBf16GradFresh(args, k, "binary op"));
  ParallelFor(dyt.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float ob[kChunk], dyb[kChunk], db[kChunk];
    for (int64_t c = begin; c < end; c += kChunk) {
      const int64_t m = std::min(kChunk, end - c);
      const float* dy = ActRead(dyt, c, m, dyb);
      for (int k = 0; k < 2; ++k) {
        const Tensor& dt = args.grad_in[k];
        if (!dt.defined()) continue;
        const bool fresh = args.fresh_grads >> k & 1u;
        const float* o = Op::kReadsOther ? ActRead(args.in[1 - k], c, m, ob) : nullptr;
        float* d = ActOut(dt, c, db);
        for (int64_t i = 0; i < m; ++i) {
          const float g = Op::Grad(dy[i], Op::kReadsOther ? o[i] : 0.f);
          d[i] = fresh ? g : d[i] + g;
        }
        ActStore(dt, c, m, d);
      }
    }
  });
  return OkStatus();
}

template <class Op>
Kernel MakeKernel() {
  Kernel k{Forward<Op>, Backward<Op>};
  k.bf16_act_inputs = 3u;  // a, b
  k.bf16_act_outputs = 1u;
  k.bf16_grad_outputs = 1u;
  k.bf16_grad_inputs = 3u;
  k.overwrites_fresh_grads = true;
  return k;
}

const bool kRegistered = RegisterKernel("add", Device::kCpu, DType::kF32, MakeKernel<Add>()) &&
                         RegisterKernel("mul", Device::kCpu, DType::kF32, MakeKernel<Mul>());

}  // namespace
}  // namespace ds::kernels::cpu
