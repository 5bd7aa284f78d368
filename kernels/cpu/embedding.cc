// embedding: out[..., :] = weight[ids[...], :]; ids int32 [B, T], weight [V, C] -> [B, T, C].
// Backward scatter-adds dout rows into dweight (ids take no gradient). Threads split the
// channels, not the tokens, so repeated ids never race and the sum order is fixed.
// Backward reads ids only. Vocab-parallel (attrs vocab_start, vocab_size): the weight holds rows
// [vocab_start, vocab_start + V) of vocab_size; other ids give zero rows and no gradient.
// A bf16 weight (a bf16 model's table, read as stored) is widened row by row as gathered.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

int64_t Start(const OpArgs& args) { return args.attrs ? args.attrs->Int("vocab_start", 0) : 0; }

Status Forward(const OpArgs& args) {
  const int32_t* ids = args.in[0].i32();
  const Tensor& weight = args.in[1];
  const int64_t n = args.in[0].numel();
  const int64_t rows = weight.dim(0), start = Start(args);
  const int64_t vocab = args.attrs ? args.attrs->Int("vocab_size", rows) : rows;
  const int64_t c = weight.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      return InvalidArgumentError(StrCat("embedding: token id ", ids[i], " at position ", i,
                                         " is out of range for vocabulary size V=", vocab));
  }
  // A bf16 model's table as stored (Kernel::bf16_reads): only the gathered rows are widened.
  const bool bf16 = weight.dtype() == DType::kBF16;
  const float* w = bf16 ? nullptr : weight.f32();
  const uint16_t* w16 = bf16 ? static_cast<const uint16_t*>(weight.data()) : nullptr;
  float* out = args.out[0].f32();
  ParallelFor(n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(c, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  const int64_t row = ids[i] - start;
                  float* o = out + i * c;
                  if (row < 0 || row >= rows) {
                    std::memset(o, 0, c * sizeof(float));
                  } else if (bf16) {
                    const uint16_t* src = w16 + row * c;
                    for (int64_t j = 0; j < c; ++j) o[j] = Bf16ToFloat(src[j]);
                  } else {
                    std::memcpy(o, w + row * c, c * sizeof(float));
                  }
                }
              });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[1].defined()) return OkStatus();
  const int32_t* ids = args.in[0].i32();
  const int64_t n = args.in[0].numel();
  const int64_t c = args.in[1].dim(1);
  const int64_t rows = args.in[1].dim(0), start = Start(args);
  const float* dout = args.grad_out[0].f32();
  float* dw = args.grad_in[1].f32();
  // Parallel over channel slices of at least 16 floats (one cache line).
  const int64_t slices = (c + 15) / 16;
  ParallelFor(slices, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * 16, 1)),
              [&](int64_t begin, int64_t end) {
                const int64_t c0 = begin * 16, c1 = std::min(c, end * 16);
                for (int64_t i = 0; i < n; ++i) {
                  const int64_t row = ids[i] - start;
                  if (row < 0 || row >= rows) continue;
                  float* dst = dw + row * c;
                  const float* src = dout + i * c;
                  for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
                }
              });
  return OkStatus();
}

Kernel MakeKernel() {
  Kernel k{Forward, Backward};
  k.bf16_reads = 1u << 1;  // the table
  return k;
}

const bool kRegistered = RegisterKernel("embedding", Device::kCpu, DType::kF32, MakeKernel());

}  // namespace
}  // namespace ds::kernels::cpu
