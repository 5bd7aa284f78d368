// linear: y = x W^T + b, PyTorch layout: x [..., in], W [out, in], optional b [out].
// With N = rows of x (all leading dims):
//   forward   y  [N, out] = x [N, in] . W^T          (sgemm, bias pre-filled, beta = 1)
//   backward  dx [N, in]  += dy [N, out] . W          (beta = 1 accumulates)
//             dW [out, in] += dy^T . x
//             db [out]    += column sums of dy
// The GEMMs run on the OpenMP pool (ParallelSgemm). Backward reads x and W.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const Tensor& w = args.in[1];
  const int64_t n = LeadingRows(x.shape()), in = w.dim(1), out = w.dim(0);
  float* y = args.out[0].f32();
  const bool has_bias = args.in.size() > 2 && args.in[2].defined();
  if (has_bias) {
    const float* b = args.in[2].f32();
    ParallelFor(n, kElementwiseGrain / std::max<int64_t>(out, 1) + 1,
                [&](int64_t begin, int64_t end) {
                  for (int64_t i = begin; i < end; ++i)
                    std::memcpy(y + i * out, b, out * sizeof(float));
                });
  }
  ParallelSgemm(false, true, n, out, in, 1.f, x.f32(), in, w.f32(), in, has_bias ? 1.f : 0.f, y,
                out);
  return OkStatus();
}

// db[j] += sum_i dy[i, j]: threads split the columns; rows stream in order.
void BiasGrad(const float* dy, int64_t n, int64_t out, float* db) {
  constexpr int64_t kCols = 256;
  const int64_t slices = (out + kCols - 1) / kCols;
  ParallelFor(slices, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * kCols, 1)),
              [&](int64_t begin, int64_t end) {
                float acc[kCols];
                for (int64_t s = begin; s < end; ++s) {
                  const int64_t c0 = s * kCols, w = std::min(kCols, out - c0);
                  std::fill(acc, acc + w, 0.f);
                  for (int64_t i = 0; i < n; ++i) {
                    const float* row = dy + i * out + c0;
                    for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
                  }
                  for (int64_t j = 0; j < w; ++j) db[c0 + j] += acc[j];
                }
              });
}

Status Backward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const Tensor& w = args.in[1];
  const int64_t n = LeadingRows(x.shape()), in = w.dim(1), out = w.dim(0);
  const float* dy = args.grad_out[0].f32();
  if (args.grad_in[0].defined())
    ParallelSgemm(false, false, n, in, out, 1.f, dy, out, w.f32(), in, 1.f, args.grad_in[0].f32(),
                  in);
  if (args.grad_in[1].defined())
    ParallelSgemm(true, false, out, in, n, 1.f, dy, out, x.f32(), in, 1.f, args.grad_in[1].f32(),
                  in);
  if (args.grad_in.size() > 2 && args.grad_in[2].defined())
    BiasGrad(dy, n, out, args.grad_in[2].f32());
  return OkStatus();
}

const bool kRegistered = RegisterKernel("linear", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
