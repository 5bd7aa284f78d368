// layernorm over the last dim: x [..., C] viewed as N rows of C; gamma, beta [C]; attr eps.
//   mean = sum(x) / C,  rstd = 1 / sqrt(sum((x - mean)^2) / C + eps)
//   xhat = (x - mean) rstd,  y = xhat gamma + beta
// saved: mean [N], rstd [N] (fp32). Backward, per row with g = dy gamma:
//   dx += rstd (g - mean(g) - xhat mean(g xhat)),  dgamma += sum_rows dy xhat,
//   dbeta += sum_rows dy.
// dgamma/dbeta: each thread sums its rows into a private [2, C] slice of scratch, then
// the slices are added in chunk order (deterministic for a fixed thread count).
// Backward reads x and gamma.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/registry.h"

namespace ds::kernels::cpu {
namespace {

Status Forward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t c = x.dim(-1), n = LeadingRows(x.shape());
  const float eps = static_cast<float>(args.attrs ? args.attrs->Float("eps", 1e-5) : 1e-5);
  const float* xp = x.f32();
  const float* gamma = args.in[1].f32();
  const float* beta = args.in[2].f32();
  float* y = args.out[0].f32();
  float* mean_out = args.saved[0].f32();
  float* rstd_out = args.saved[1].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * c;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < c; ++j) sum += row[j];
      const float mean = sum / c;
      float var = 0.f;
#pragma omp simd reduction(+ : var)
      for (int64_t j = 0; j < c; ++j) var += (row[j] - mean) * (row[j] - mean);
      const float rstd = 1.f / std::sqrt(var / c + eps);
      float* out = y + r * c;
      for (int64_t j = 0; j < c; ++j) out[j] = (row[j] - mean) * rstd * gamma[j] + beta[j];
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  });
  return OkStatus();
}

Status Backward(const OpArgs& args) {
  const Tensor& x = args.in[0];
  const int64_t c = x.dim(-1), n = LeadingRows(x.shape());
  const float* xp = x.f32();
  const float* gamma = args.in[1].f32();
  const float* dy = args.grad_out[0].f32();
  const float* mean = args.saved[0].f32();
  const float* rstd = args.saved[1].f32();
  float* dx = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  float* dgamma = args.grad_in[1].defined() ? args.grad_in[1].f32() : nullptr;
  float* dbeta = args.grad_in[2].defined() ? args.grad_in[2].f32() : nullptr;

  const int chunks = PlannedThreads(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1);
  float* partial = ThreadScratch(0, static_cast<size_t>(chunks) * 2 * c);
  std::fill(partial, partial + static_cast<size_t>(chunks) * 2 * c, 0.f);
  ParallelChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    float* pg = partial + static_cast<size_t>(chunk) * 2 * c;  // dgamma partial
    float* pb = pg + c;                                        // dbeta partial
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * c;
      const float* dyr = dy + r * c;
      const float m = mean[r], s = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < c; ++j) {
        const float gj = dyr[j] * gamma[j];
        sum_g += gj;
        sum_gx += gj * (xr[j] - m) * s;
      }
      const float mean_g = sum_g / c, mean_gx = sum_gx / c;
      for (int64_t j = 0; j < c; ++j) {
        const float xhat = (xr[j] - m) * s;
        pg[j] += dyr[j] * xhat;
        pb[j] += dyr[j];
        if (dx) dx[r * c + j] += s * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
      }
    }
  });
  for (int k = 0; k < chunks; ++k) {
    const float* pg = partial + static_cast<size_t>(k) * 2 * c;
    for (int64_t j = 0; j < c; ++j) {
      if (dgamma) dgamma[j] += pg[j];
      if (dbeta) dbeta[j] += pg[c + j];
    }
  }
  return OkStatus();
}

const bool kRegistered =
    RegisterKernel("layernorm", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
