// linear on CUDA (f32, bf16): the CPU op's semantics (kernels/cpu/linear.cc) through
// cuBLASLt. x [..., in], W [out, in] (PyTorch layout), optional b [out], all one dtype;
// N = rows of x. In LtMatmul's row-major terms:
//   forward   y [N, out]   = x . W^T            m=N,   n=out, k=in   B^T, bias epilogue
//   backward  dx [N, in]  += dy . W             m=N,   n=in,  k=out  beta=1
//             dW [out, in] += dy^T . x          m=out, n=in,  k=N    A^T, beta=1
//             db [out]    += column sums of dy  (LaunchBiasGrad, fp32 sums, deterministic)
// fp32 is true fp32 (no TF32). Launches go to the thread's cuda::CurrentStream() and are
// asynchronous; pointers are device memory.
//
// Rows of `out` elements that are not a multiple of 16 bytes (GPT-2's 50257-word vocabulary
// in the LM head) would push cuBLASLt off its tensor-core kernels: y and dy are staged
// through LtMatmul::Staging with rows padded to 16 bytes, a chunk of rows at a time
// (Staged*): the forward GEMMs into the padded rows and copies them out (LaunchCopyRows),
// the backward copies dy's rows in and runs both GEMMs from there.
#include <algorithm>
#include <utility>

#include "kernels/cuda/blas/bias_grad_launch.h"
#include "kernels/cuda/blas/copy_rows_launch.h"
#include "kernels/cuda/blas/lt_matmul.h"
#include "kernels/registry.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/stream_context.h"

namespace ds::kernels::blas {
namespace {

int64_t LeadingRows(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) n *= s[i];
  return n;
}

// Shapes and dtypes of one call; InvalidArgument names the mismatch.
struct Dims {
  int64_t n = 0, in = 0, out = 0;
  bool has_bias = false;
};

Status CheckArgs(const OpArgs& args, DType dtype, Dims* d) {
  if (args.in.size() < 2 || args.out.empty())
    return InvalidArgumentError("linear (cuda): needs x, W and an output");
  const Tensor& x = args.in[0];
  const Tensor& w = args.in[1];
  if (x.rank() < 1 || w.rank() != 2)
    return InvalidArgumentError("linear (cuda): x must have rank >= 1 and W rank 2, got " +
                                ShapeToString(x.shape()) + " and " + ShapeToString(w.shape()));
  d->n = LeadingRows(x.shape());
  d->in = w.dim(1);
  d->out = w.dim(0);
  if (x.dim(-1) != d->in)
    return InvalidArgumentError("linear (cuda): x has " + std::to_string(x.dim(-1)) +
                                " features but W expects " + std::to_string(d->in));
  d->has_bias = args.in.size() > 2 && args.in[2].defined();
  for (const Tensor* t : {&x, &w, &args.out[0]})
    if (t->dtype() != dtype)
      return InvalidArgumentError(std::string("linear (cuda): expected ") + DTypeName(dtype) +
                                  " tensors, got " + DTypeName(t->dtype()));
  if (d->has_bias && (args.in[2].dtype() != dtype || args.in[2].numel() != d->out))
    return InvalidArgumentError("linear (cuda): b must be " + std::string(DTypeName(dtype)) + " [" +
                                std::to_string(d->out) + "], got " +
                                ShapeToString(args.in[2].shape()));
  return OkStatus();
}

BiasGradType ToBiasGradType(DType t) {
  return t == DType::kBF16  ? BiasGradType::kBF16
         : t == DType::kF16 ? BiasGradType::kF16
                            : BiasGradType::kF32;
}

int64_t ElementSize(DType t) { return t == DType::kF32 ? 4 : 2; }
// The row length, in elements, that makes `cols` elements of `t` a multiple of 16 bytes.
int64_t PaddedRow(int64_t cols, DType t) {
  const int64_t per16 = 16 / ElementSize(t);
  return (cols + per16 - 1) / per16 * per16;
}
const char* At(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }
char* At(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }

// Rows of the staging buffer per chunk for rows of `out` elements (padded).
StatusOr<std::pair<void*, int64_t>> StagingRows(int64_t out, DType t, cudaStream_t stream) {
  DS_ASSIGN_OR_RETURN(void* buf, DefaultLtMatmul().Staging(stream));
  const int64_t row_bytes = PaddedRow(out, t) * ElementSize(t);
  return std::make_pair(
      buf, std::max<int64_t>(1, static_cast<int64_t>(LtMatmul::kStagingBytes) / row_bytes));
}

// Forward with y's rows staged: y[r0:r0+r] = x[r0:r0+r] W^T (+ b) into padded rows, copied out.
Status StagedForward(const OpArgs& args, DType t, const Dims& d) {
  const cudaStream_t stream = cuda::CurrentStream();
  DS_ASSIGN_OR_RETURN(auto staging, StagingRows(d.out, t, stream));
  const int64_t es = ElementSize(t), padded = PaddedRow(d.out, t);
  for (int64_t r0 = 0; r0 < d.n; r0 += staging.second) {
    const int64_t r = std::min(staging.second, d.n - r0);
    MatmulArgs g;
    g.m = r;
    g.n = d.out;
    g.k = d.in;
    g.trans_b = true;
    g.dtype = t;
    g.a = At(args.in[0].data(), r0 * d.in * es);
    g.b = args.in[1].data();
    g.d = staging.first;
    g.ldd = padded;
    if (d.has_bias) {
      g.epilogue = Epilogue::kBias;
      g.bias = args.in[2].data();
    }
    DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
    DS_CUDA_RETURN_IF_ERROR(LaunchCopyRows(At(args.out[0].data(), r0 * d.out * es), d.out,
                                           staging.first, padded, r, d.out, es, stream));
  }
  return OkStatus();
}

// Backward with dy's rows staged: per chunk, dy's rows copied into padded rows, then
// dx[chunk] += dy[chunk] W and dW += dy[chunk]^T x[chunk] read them from there.
Status StagedBackward(const OpArgs& args, DType t, const Dims& d, bool want_dx, bool want_dw) {
  const cudaStream_t stream = cuda::CurrentStream();
  DS_ASSIGN_OR_RETURN(auto staging, StagingRows(d.out, t, stream));
  const int64_t es = ElementSize(t), padded = PaddedRow(d.out, t);
  for (int64_t r0 = 0; r0 < d.n; r0 += staging.second) {
    const int64_t r = std::min(staging.second, d.n - r0);
    DS_CUDA_RETURN_IF_ERROR(LaunchCopyRows(staging.first, padded,
                                           At(args.grad_out[0].data(), r0 * d.out * es), d.out, r,
                                           d.out, es, stream));
    MatmulArgs g;
    g.dtype = t;
    g.beta = 1.f;
    g.a = staging.first;
    g.lda = padded;
    if (want_dx) {
      g.m = r;
      g.n = d.in;
      g.k = d.out;
      g.b = args.in[1].data();
      g.d = At(args.grad_in[0].data(), r0 * d.in * es);
      DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
    }
    if (want_dw) {
      g.m = d.out;
      g.n = d.in;
      g.k = r;
      g.trans_a = true;
      g.b = At(args.in[0].data(), r0 * d.in * es);
      g.d = args.grad_in[1].data();
      DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
    }
  }
  return OkStatus();
}

// Backward on dense rows: dx += dy W, dW += dy^T x straight from dy.
Status DenseBackward(const OpArgs& args, DType t, const Dims& d, bool want_dx, bool want_dw) {
  const cudaStream_t stream = cuda::CurrentStream();
  MatmulArgs g;
  g.dtype = t;
  g.beta = 1.f;
  g.a = args.grad_out[0].data();
  if (want_dx) {
    g.m = d.n;
    g.n = d.in;
    g.k = d.out;
    g.b = args.in[1].data();
    g.d = args.grad_in[0].data();
    DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
  }
  if (want_dw) {
    g.m = d.out;
    g.n = d.in;
    g.k = d.n;
    g.trans_a = true;
    g.b = args.in[0].data();
    g.d = args.grad_in[1].data();
    DS_RETURN_IF_ERROR(DefaultLtMatmul().Run(g, stream));
  }
  return OkStatus();
}

template <DType kType>
Status Forward(const OpArgs& args) {
  Dims d;
  DS_RETURN_IF_ERROR(CheckArgs(args, kType, &d));
  if (d.out != PaddedRow(d.out, kType)) return StagedForward(args, kType, d);
  MatmulArgs g;
  g.m = d.n;
  g.n = d.out;
  g.k = d.in;
  g.trans_b = true;
  g.dtype = kType;
  g.a = args.in[0].data();
  g.b = args.in[1].data();
  g.d = args.out[0].data();
  if (d.has_bias) {
    g.epilogue = Epilogue::kBias;
    g.bias = args.in[2].data();
  }
  return DefaultLtMatmul().Run(g, cuda::CurrentStream());
}

template <DType kType>
Status Backward(const OpArgs& args) {
  Dims d;
  DS_RETURN_IF_ERROR(CheckArgs(args, kType, &d));
  if (args.grad_out.empty() || !args.grad_out[0].defined())
    return InvalidArgumentError("linear (cuda): backward needs dy");
  const void* dy = args.grad_out[0].data();
  const cudaStream_t stream = cuda::CurrentStream();
  const bool want_dx = args.grad_in.size() > 0 && args.grad_in[0].defined();
  const bool want_dw = args.grad_in.size() > 1 && args.grad_in[1].defined();
  if (d.out != PaddedRow(d.out, kType) && (want_dx || want_dw)) {
    DS_RETURN_IF_ERROR(StagedBackward(args, kType, d, want_dx, want_dw));
  } else {
    DS_RETURN_IF_ERROR(DenseBackward(args, kType, d, want_dx, want_dw));
  }
  if (args.grad_in.size() > 2 && args.grad_in[2].defined())
    DS_CUDA_RETURN_IF_ERROR(
        LaunchBiasGrad(dy, d.n, d.out, ToBiasGradType(kType), args.grad_in[2].data(), stream));
  return OkStatus();
}

const bool kRegistered = RegisterKernel("linear", Device::kCuda, DType::kF32,
                                        {Forward<DType::kF32>, Backward<DType::kF32>}) &&
                         RegisterKernel("linear", Device::kCuda, DType::kBF16,
                                        {Forward<DType::kBF16>, Backward<DType::kBF16>}) &&
                         RegisterKernel("linear", Device::kCuda, DType::kF16,
                                        {Forward<DType::kF16>, Backward<DType::kF16>});

}  // namespace
}  // namespace ds::kernels::blas
