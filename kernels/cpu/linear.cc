// linear: y = x W^T + b, PyTorch layout: x [..., in], W [out, in], optional b [out].
// With N = rows of x (all leading dims):
//   forward   y  [N, out] = x [N, in] . W^T + b      (b in the product's epilogue)
//   backward  dx [N, in]  += dy [N, out] . W          (beta = 1 accumulates; 0 when fresh)
//             dW [out, in] += dy^T . x
//             db [out]    += column sums of dy
// The products go through gemm.h (oneDNN or OpenBLAS). With OpArgs::matmul = kBF16, x, W and
// dy are rounded to bf16 first and the products accumulate in fp32, as autocast's bf16 matmul
// does; a bf16 model's W comes as stored (bf16_inputs), an fp32 W (LoRA's frozen base) is
// rounded. In a bf16 host step x and y may be bf16 activations (bf16_act_inputs / outputs): x is
// multiplied as stored, y written in bf16 by the product itself (GemmBf16Out), rounded once;
// so are dy and a fresh dx (bf16_grad_outputs / bf16_grad_inputs). A bf16 model's dW is added
// into its bf16 gradient by the product itself (GemmBf16Add, bf16_param_grads), rounded once
// per call as an fp32 scratch added in after would be.
// Backward reads x and W.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/act_io.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/gemm.h"
#include "kernels/registry.h"
#include "runtime/core/bf16_simd.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

struct Dims {
  int64_t n, in, out;
};

Dims DimsOf(const OpArgs& args) {
  const Tensor& w = args.in[1];
  return {LeadingRows(args.in[0].shape()), w.dim(1), w.dim(0)};
}

// The three products' shapes (row-major, dense).
GemmShape ForwardShape(const Dims& d) { return {false, true, d.n, d.out, d.in, d.in, d.in, d.out}; }
GemmShape InputGradShape(const Dims& d) {
  return {false, false, d.n, d.in, d.out, d.out, d.in, d.in};
}
GemmShape WeightGradShape(const Dims& d) {
  return {true, false, d.out, d.in, d.n, d.out, d.in, d.in};
}

// bf16 copies of a product's fp32 operands, reused from call to call (one thread drives the
// executor; the sizes settle after the first step).
const uint16_t* ToBf16(const float* x, int64_t count, int slot) {
  thread_local std::vector<uint16_t> buffers[3];
  std::vector<uint16_t>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  ConvertF32ToBf16(x, b.data(), count);
  return b.data();
}

// A product's bf16 operand: a bf16 tensor as it is (a bf16 model's weight, Kernel::bf16_inputs),
// an fp32 one rounded into the slot's copy.
const uint16_t* Bf16Operand(const Tensor& t, int64_t count, int slot) {
  if (t.dtype() == DType::kBF16) return static_cast<const uint16_t*>(t.data());
  return ToBf16(t.f32(), count, slot);
}

Status Forward(const OpArgs& args) {
  const Dims d = DimsOf(args);
  const bool has_bias = args.in.size() > 2 && args.in[2].defined();
  const float* bias = has_bias ? args.in[2].f32() : nullptr;  // added in the product's epilogue
  if (args.matmul == DType::kBF16) {
    const uint16_t* x = Bf16Operand(args.in[0], d.n * d.in, 0);
    const uint16_t* w = Bf16Operand(args.in[1], d.out * d.in, 1);
    if (IsBf16(args.out[0]))
      GemmBf16Out(ForwardShape(d), x, w, static_cast<uint16_t*>(args.out[0].data()),
                  Bf16Gemm::kNative, bias);
    else
      GemmBf16(ForwardShape(d), 1.f, x, w, 0.f, args.out[0].f32(), Bf16Gemm::kNative, bias);
  } else {
    if (IsBf16(args.in[0]) || IsBf16(args.out[0]))
      return InvalidArgumentError("linear: bf16 activations need bf16 products (OpArgs::matmul)");
    Gemm(ForwardShape(d), 1.f, args.in[0].f32(), args.in[1].f32(), 0.f, args.out[0].f32(), bias);
  }
  return OkStatus();
}

constexpr int64_t kBiasCols = 256;

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The sums of a bf16 dy's 256-column slice from c0 in 16 registers, rows in order (each column's
// sum in the same order as the loop below, so the same bits).
__attribute__((target("avx512f"))) void BiasSumsBf16x256(const uint16_t* dy, int64_t n, int64_t out,
                                                         int64_t c0, float* acc) {
  __m512 s[16];
  for (int v = 0; v < 16; ++v) s[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* row = dy + i * out + c0;
    for (int v = 0; v < 16; ++v) s[v] = _mm512_add_ps(s[v], bf16_simd::Load16(row + 16 * v));
  }
  for (int v = 0; v < 16; ++v) _mm512_storeu_ps(acc + 16 * v, s[v]);
}
#pragma GCC diagnostic pop

// db[j] += sum_i dy[i, j] (a fresh db: =): threads split the columns; rows stream in order. dy
// fp32 or bf16 (on AVX-512, a bf16 dy's whole slices are summed in registers).
void BiasGrad(const Tensor& dy, int64_t n, int64_t out, bool fresh, float* db) {
  constexpr int64_t kCols = kBiasCols;
  const int64_t slices = (out + kCols - 1) / kCols;
  const bool wide = IsBf16(dy) && CpuHasAvx512();
  ParallelFor(slices, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * kCols, 1)),
              [&](int64_t begin, int64_t end) {
                float acc[kCols], buf[kCols];
                for (int64_t s = begin; s < end; ++s) {
                  const int64_t c0 = s * kCols, w = std::min(kCols, out - c0);
                  if (wide && w == kCols) {
                    BiasSumsBf16x256(Bf16Data(dy), n, out, c0, acc);
                  } else {
                    std::fill(acc, acc + w, 0.f);
                    for (int64_t i = 0; i < n; ++i) {
                      const float* row = ActRead(dy, i * out + c0, w, buf);
                      for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
                    }
                  }
                  if (fresh)
                    std::copy(acc, acc + w, db + c0);
                  else
                    for (int64_t j = 0; j < w; ++j) db[c0 + j] += acc[j];
                }
              });
}

// beta of the product into grad_in[k]: 0 where it is fresh (Kernel::overwrites_fresh_grads).
float GradBeta(const OpArgs& args, int k) { return args.fresh_grads >> k & 1u ? 0.f : 1.f; }

// dy and a fresh dx may be bf16 (bf16_grad_outputs / bf16_grad_inputs).
Status Bf16Backward(const OpArgs& args, const Dims& d) {
  const uint16_t* dy = Bf16Operand(args.grad_out[0], d.n * d.out, 0);
  const Tensor& dx = args.grad_in[0];
  DS_RETURN_IF_ERROR(CheckBf16GradFresh(args, 0, "linear"));
  if (dx.defined() && IsBf16(dx)) {
    GemmBf16Out(InputGradShape(d), dy, Bf16Operand(args.in[1], d.out * d.in, 1),
                static_cast<uint16_t*>(dx.data()), Bf16Gemm::kNative);
  } else if (dx.defined()) {
    GemmBf16(InputGradShape(d), 1.f, dy, Bf16Operand(args.in[1], d.out * d.in, 1),
             GradBeta(args, 0), dx.f32(), Bf16Gemm::kNative);
  }
  const Tensor& dw = args.grad_in[1];
  const uint16_t* x = dw.defined() ? Bf16Operand(args.in[0], d.n * d.in, 2) : nullptr;
  if (dw.defined() && IsBf16(dw))
    GemmBf16Add(WeightGradShape(d), dy, x, static_cast<uint16_t*>(dw.data()), Bf16Gemm::kNative);
  else if (dw.defined())
    GemmBf16(WeightGradShape(d), 1.f, dy, x, GradBeta(args, 1), dw.f32(), Bf16Gemm::kNative);
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const Dims d = DimsOf(args);
  const float* dy = args.grad_out[0].f32();
  if (args.matmul == DType::kBF16) {
    DS_RETURN_IF_ERROR(Bf16Backward(args, d));
  } else {
    if (args.grad_in[1].defined() && IsBf16(args.grad_in[1]))
      return InvalidArgumentError("linear: a bf16 weight gradient needs OpArgs::matmul bf16");
    if (args.grad_in[0].defined())
      Gemm(InputGradShape(d), 1.f, dy, args.in[1].f32(), GradBeta(args, 0), args.grad_in[0].f32());
    if (args.grad_in[1].defined())
      Gemm(WeightGradShape(d), 1.f, dy, args.in[0].f32(), GradBeta(args, 1), args.grad_in[1].f32());
  }
  if (args.grad_in.size() > 2 && args.grad_in[2].defined())
    BiasGrad(args.grad_out[0], d.n, d.out, args.fresh_grads >> 2 & 1u, args.grad_in[2].f32());
  return OkStatus();
}

// The oneDNN primitives of the node's products, made when the executor is built.
Status Prepare(const OpArgs& args) {
  const Dims d = DimsOf(args);
  const bool bf16 = args.matmul == DType::kBF16;
  const bool has_bias = args.in.size() > 2 && args.in[2].defined();
  DS_RETURN_IF_ERROR(
      PrepareGemm(ForwardShape(d), 1.f, 0.f, bf16, has_bias, bf16 && IsBf16(args.out[0])));
  if (!args.grad_in.empty() && args.grad_in[0].defined())
    DS_RETURN_IF_ERROR(PrepareGemm(InputGradShape(d), 1.f, GradBeta(args, 0), bf16, false,
                                   bf16 && IsBf16(args.grad_in[0])));
  if (args.grad_in.size() > 1 && args.grad_in[1].defined()) {
    const bool add_bf16 = bf16 && IsBf16(args.grad_in[1]);  // GemmBf16Add: beta 1, bf16 out
    DS_RETURN_IF_ERROR(PrepareGemm(WeightGradShape(d), 1.f, add_bf16 ? 1.f : GradBeta(args, 1),
                                   bf16, false, add_bf16));
  }
  return OkStatus();
}

Kernel MakeKernel() {
  Kernel k{Forward, Backward, Prepare};
  k.bf16_inputs = 1u << 1;       // the weight
  k.bf16_act_inputs = 1u;        // x
  k.bf16_act_outputs = 1u;       // y
  k.bf16_grad_outputs = 1u;      // dy
  k.bf16_grad_inputs = 1u;       // dx
  k.bf16_param_grads = 1u << 1;  // dW
  k.overwrites_fresh_grads = true;
  return k;
}

const bool kRegistered = RegisterKernel("linear", Device::kCpu, DType::kF32, MakeKernel());

}  // namespace
}  // namespace ds::kernels::cpu
