// embedding: out[..., :] = weight[ids[...], :]; ids int32 [B, T], weight [V, C] -> [B, T, C].
// Backward scatter-adds dout rows into dweight (ids take no gradient). Threads split the
// channels, not the tokens, so repeated ids never race and the sum order is fixed.
// Backward reads ids only.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const int32_t* ids = args.in[0].i32();
  const Tensor& weight = args.in[1];
  const int64_t n = args.in[0].numel();
  const int64_t vocab = weight.dim(0);
  const int64_t c = weight.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      return InvalidArgumentError(StrCat("embedding: token id ", ids[i], " at position ", i,
                                         " is out of range for vocabulary size V=", vocab));
  }
  const float* w = weight.f32();
  float* out = args.out[0].f32();
  ParallelFor(n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(c, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i)
                  std::memcpy(out + i * c, w + ids[i] * c, c * sizeof(float));
              });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[1].defined()) return OkStatus();
  const int32_t* ids = args.in[0].i32();
  const int64_t n = args.in[0].numel();
  const int64_t c = args.in[1].dim(1);
  const float* dout = args.grad_out[0].f32();
  float* dw = args.grad_in[1].f32();
  // Parallel over channel slices of at least 16 floats (one cache line).
  const int64_t slices = (c + 15) / 16;
  ParallelFor(slices, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * 16, 1)),
              [&](int64_t begin, int64_t end) {
                const int64_t c0 = begin * 16, c1 = std::min(c, end * 16);
                for (int64_t i = 0; i < n; ++i) {
                  float* dst = dw + ids[i] * c;
                  const float* src = dout + i * c;
                  for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
                }
              });
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("embedding", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
