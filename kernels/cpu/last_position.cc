// last_position (definition: kernels/ops/last_position.cc): each sequence's last row copied.
#include <cstring>

#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2);
  for (int64_t i = 0; i < b; ++i)
    std::memcpy(args.out[0].f32() + i * c, x.f32() + (i * t + t - 1) * c, c * sizeof(float));
  return OkStatus();
}

Status NoBackward(const OpArgs&) {
  return UnimplementedError("last_position is forward only (generation)");
}

const bool kRegistered =
    RegisterKernel("last_position", Device::kCpu, DType::kF32, {Forward, NoBackward});

}  // namespace
}  // namespace ds::kernels::cpu
