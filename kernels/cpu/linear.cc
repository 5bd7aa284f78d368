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

Status Infer(const Attrs&, const std::vector<TensorSpec>& in, std::vector<TensorSpec>* out) {
  DS_RETURN_IF_ERROR(CheckArity("linear", in, 2, 3));
  DS_RETURN_IF_ERROR(CheckMinRank("linear", "x", in[0], 1));
  DS_RETURN_IF_ERROR(CheckRank("linear", "W", in[1], 2));
  DS_RETURN_IF_ERROR(CheckFloat("linear", "x", in[0]));
  DS_RETURN_IF_ERROR(CheckFloat("linear", "W", in[1]));
  const int64_t features = in[0].shape.back();
  if (features != in[1].shape[1])
    return InvalidArgumentError(
        StrCat("linear: x has ", features, " features but W expects ", in[1].shape[1]));
  if (in.size() == 3) {
    DS_RETURN_IF_ERROR(CheckFloat("linear", "b", in[2]));
    if (in[2].shape != Shape{in[1].shape[0]})
      return InvalidArgumentError(StrCat("linear: b has shape ", ShapeToString(in[2].shape),
                                         " but W has ", in[1].shape[0], " outputs"));
  }
  Shape shape = in[0].shape;
  shape.back() = in[1].shape[0];
  *out = {TensorSpec{shape, in[0].dtype}};
  return OkStatus();
}

// 2 N in out for the GEMM, plus N out for the bias.
double ForwardFlops(const Attrs&, const std::vector<TensorSpec>& in) {
  const double n = LeadingRows(in[0].shape), k = in[1].shape[1], m = in[1].shape[0];
  return 2.0 * n * k * m + (in.size() > 2 ? n * m : 0.0);
}

// Two GEMMs (dx, dW), plus N out for db.
double BackwardFlops(const Attrs&, const std::vector<TensorSpec>& in) {
  const double n = LeadingRows(in[0].shape), k = in[1].shape[1], m = in[1].shape[0];
  return 4.0 * n * k * m + (in.size() > 2 ? n * m : 0.0);
}

OpDef Def() {
  OpDef def;
  def.name = "linear";
  def.min_inputs = 2;
  def.max_inputs = 3;
  def.infer = Infer;
  def.forward_flops = ForwardFlops;
  def.backward_flops = BackwardFlops;
  def.backward_reads_inputs = (1u << 0) | (1u << 1);
  return def;
}

const bool kRegistered =
    RegisterOp(Def()) && RegisterKernel("linear", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
