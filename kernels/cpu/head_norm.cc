// head_rmsnorm (definition: kernels/ops/head_norm.cc): per token, each q head x (D values)
// becomes x rstd q_weight and each k head x rstd k_weight, rstd = 1 / sqrt(mean(x^2) + eps),
// as the rmsnorm kernel computes a row (kernels/cpu/norm.cc); v heads are copied. Backward per
// normalized head, with g = dy w and xhat = x rstd:
//   dx += rstd (g - xhat mean(g xhat)),  dw += dy xhat;  v heads: dx += dy.
// dw: each chunk of tokens sums into its own slice of scratch, added in chunk order.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Layout(const OpArgs& args, HeadLayout* l) {
  static const Attrs kEmpty;
  return InferHeadLayout("head_rmsnorm", args.attrs ? *args.attrs : kEmpty, args.in[0].spec(), l);
}

float Eps(const OpArgs& args) {
  return static_cast<float>(args.attrs ? args.attrs->Float("eps", 1e-6) : 1e-6);
}

Status Forward(const OpArgs& args) {
  HeadLayout l;
  DS_RETURN_IF_ERROR(Layout(args, &l));
  const int64_t d = l.head_dim, row = l.row(), normed = l.n_head + l.n_kv_head;
  const float eps = Eps(args);
  const float* x = args.in[0].f32();
  const float* qw = args.in[1].f32();
  const float* kw = args.in[2].f32();
  float* y = args.out[0].f32();
  float* rstd = args.saved[0].f32();
  ParallelFor(l.batch * l.seq, kElementwiseGrain / std::max<int64_t>(row, 1) + 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  for (int64_t h = 0; h < normed; ++h) {
                    const float* xh = x + r * row + h * d;
                    float* yh = y + r * row + h * d;
                    const float* w = h < l.n_head ? qw : kw;
                    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
                    for (int64_t j = 0; j < d; ++j) ss += xh[j] * xh[j];
                    const float s = 1.f / std::sqrt(ss / d + eps);
                    for (int64_t j = 0; j < d; ++j) yh[j] = xh[j] * s * w[j];
                    rstd[r * normed + h] = s;
                  }
                  std::copy(x + r * row + normed * d, x + (r + 1) * row, y + r * row + normed * d);
                }
              });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  HeadLayout l;
  DS_RETURN_IF_ERROR(Layout(args, &l));
  const int64_t d = l.head_dim, row = l.row(), normed = l.n_head + l.n_kv_head;
  const int64_t n = l.batch * l.seq, grain = kElementwiseGrain / std::max<int64_t>(row, 1) + 1;
  const float* x = args.in[0].f32();
  const float* weights[2] = {args.in[1].f32(), args.in[2].f32()};
  const float* dy = args.grad_out[0].f32();
  const float* rstd = args.saved[0].f32();
  float* dx = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  const int chunks = PlannedThreads(n, grain);
  float* partial = ThreadScratch(0, chunks * 2 * d);  // per chunk: dq_weight, dk_weight
  std::fill(partial, partial + chunks * 2 * d, 0.f);
  ParallelChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < normed; ++h) {
        const int which = h < l.n_head ? 0 : 1;
        const float* w = weights[which];
        float* pw = partial + (chunk * 2 + which) * d;
        const float* xh = x + r * row + h * d;
        const float* dyh = dy + r * row + h * d;
        const float s = rstd[r * normed + h];
        float sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_gx)
        for (int64_t j = 0; j < d; ++j) sum_gx += dyh[j] * w[j] * xh[j] * s;
        const float mean_gx = sum_gx / d;
        for (int64_t j = 0; j < d; ++j) {
          const float xhat = xh[j] * s;
          pw[j] += dyh[j] * xhat;
          if (dx) dx[r * row + h * d + j] += s * (dyh[j] * w[j] - xhat * mean_gx);
        }
      }
      if (dx)
        for (int64_t j = normed * d; j < row; ++j) dx[r * row + j] += dy[r * row + j];
    }
  });
  for (int which = 0; which < 2; ++which) {
    if (!args.grad_in[1 + which].defined()) continue;
    float* dw = args.grad_in[1 + which].f32();
    for (int k = 0; k < chunks; ++k)
      for (int64_t j = 0; j < d; ++j) dw[j] += partial[(k * 2 + which) * d + j];
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("head_rmsnorm", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
