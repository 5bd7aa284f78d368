// embedding: out[..., :] = weight[ids[...], :]; ids int32 [B, T], weight [V, C] -> [B, T, C].
// Backward scatter-adds dout rows into dweight (ids take no gradient). Threads split the
// channels, not the tokens, so repeated ids never race and the sum order is fixed.
// Backward reads ids only. Vocab-parallel (attrs vocab_start, vocab_size): the weight holds rows
// [vocab_start, vocab_start + V) of vocab_size; other ids give zero rows and no gradient.
// A bf16 weight (a bf16 model's table, read as stored) is widened row by row as gathered, and
// its gradient (bf16_param_grads) gets each touched row's sum, taken in fp32 in position order,
// added once: the bits of an fp32 scatter-add added in after, without a pass over the table.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"
#include "runtime/core/dtype.h"

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

// Rows of a bf16 gradient: the tokens grouped by id (positions ascending within a group), one
// group per task, so no two threads touch a row.
void BackwardBf16(const int32_t* ids, int64_t n, int64_t rows, int64_t start, int64_t c,
                  const float* dout, uint16_t* dw) {
  // Reused from call to call (no allocation per step); named through references, since the
  // worker threads below would see their own (empty) thread_local copies.
  thread_local std::vector<int64_t> order_buffer, group_buffer;
  std::vector<int64_t>& order = order_buffer;
  std::vector<int64_t>& groups = group_buffer;
  order.clear();
  groups.clear();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] - start >= 0 && ids[i] - start < rows) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  // groups: where each id's run starts in `order`, and the end
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || ids[order[k]] != ids[order[k - 1]]) groups.push_back(static_cast<int64_t>(k));
  groups.push_back(static_cast<int64_t>(order.size()));
  const int64_t tasks = static_cast<int64_t>(groups.size()) - 1;
  ParallelFor(tasks, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(c, 1)),
              [&](int64_t begin, int64_t end) {
                float* sum = ThreadScratch(0, static_cast<size_t>(c));
                for (int64_t g = begin; g < end; ++g) {
                  std::fill(sum, sum + c, 0.0f);
                  for (int64_t k = groups[g]; k < groups[g + 1]; ++k) {
                    const float* src = dout + order[k] * c;
                    for (int64_t j = 0; j < c; ++j) sum[j] += src[j];
                  }
                  AddF32IntoBf16(sum, dw + (ids[order[groups[g]]] - start) * c, c);
                }
              });
}

Status Backward(const OpArgs& args) {
  if (!args.grad_in[1].defined()) return OkStatus();
  if (args.grad_in[1].dtype() == DType::kBF16) {
    BackwardBf16(args.in[0].i32(), args.in[0].numel(), args.in[1].dim(0), Start(args),
                 args.in[1].dim(1), args.grad_out[0].f32(),
                 static_cast<uint16_t*>(args.grad_in[1].data()));
    return OkStatus();
  }
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
  k.bf16_reads = 1u << 1;        // the table
  k.bf16_param_grads = 1u << 1;  // and its gradient
  return k;
}

const bool kRegistered = RegisterKernel("embedding", Device::kCpu, DType::kF32, MakeKernel());

}  // namespace
}  // namespace ds::kernels::cpu
