// dropout: y = keep(i) ? x / (1 - p) : 0, identity when !args.training or p == 0.
//
// The keep mask is a pure function of (args.seed, element index): element i is kept when
// the top 24 bits of SplitMix64(seed, i) are >= round(p * 2^24). Backward regenerates the
// mask from the same seed instead of storing it, so the executor must pass the forward's
// seed (and training flag) to backward. Nothing is saved; backward reads no tensors.
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

struct Mask {
  bool identity;       // eval mode or p == 0
  uint64_t threshold;  // keep when (hash >> 40) >= threshold
  float scale;         // 1 / (1 - p)
};

Mask MakeMask(const OpArgs& args) {
  const double p = args.attrs ? args.attrs->Float("p", 0.0) : 0.0;
  Mask m;
  m.identity = !args.training || p <= 0.0;
  m.threshold = static_cast<uint64_t>(std::llround(p * 16777216.0));
  m.scale = static_cast<float>(1.0 / (1.0 - p));
  return m;
}

// dst[i] (+)= keep(i) ? src[i] * scale : 0.
template <bool kAccumulate>
void Apply(const Mask& m, uint64_t seed, const float* src, float* dst, int64_t n) {
  ParallelFor(n, kElementwiseGrain / 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float v = src[i];
      if (!m.identity)
        v = (SplitMix64(seed, static_cast<uint64_t>(i)) >> 40) >= m.threshold ? v * m.scale : 0.f;
      if (kAccumulate) {
        dst[i] += v;
      } else {
        dst[i] = v;
      }
    }
  });
}

Status Forward(const OpArgs& args) {
  Apply<false>(MakeMask(args), args.seed, args.in[0].f32(), args.out[0].f32(), args.in[0].numel());
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[0].defined()) return OkStatus();
  Apply<true>(MakeMask(args), args.seed, args.grad_out[0].f32(), args.grad_in[0].f32(),
              args.grad_out[0].numel());
  return OkStatus();
}

const bool kRegistered = RegisterKernel("dropout", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
