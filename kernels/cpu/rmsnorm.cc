// rmsnorm over the last dim (Llama): x [..., C] as N rows; gamma [C]; attr eps.
//   rstd = 1 / sqrt(sum(x^2) / C + eps),  xhat = x rstd,  y = xhat gamma
// saved: rstd [N] (fp32). Backward, per row with g = dy gamma:
//   dx += rstd (g - xhat mean(g xhat)),  dgamma += sum_rows dy xhat.
// dgamma sums per-thread partials in chunk order, as layernorm does.
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
  const float eps = static_cast<float>(args.attrs ? args.attrs->Float("eps", 1e-6) : 1e-6);
  const float* xp = x.f32();
  const float* gamma = args.in[1].f32();
  float* y = args.out[0].f32();
  float* rstd_out = args.saved[0].f32();
  ParallelFor(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * c;
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < c; ++j) ss += row[j] * row[j];
      const float rstd = 1.f / std::sqrt(ss / c + eps);
      float* out = y + r * c;
      for (int64_t j = 0; j < c; ++j) out[j] = row[j] * rstd * gamma[j];
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
  const float* rstd = args.saved[0].f32();
  float* dx = args.grad_in[0].defined() ? args.grad_in[0].f32() : nullptr;
  float* dgamma = args.grad_in[1].defined() ? args.grad_in[1].f32() : nullptr;

  const int chunks = PlannedThreads(n, kElementwiseGrain / std::max<int64_t>(c, 1) + 1);
  float* partial = ThreadScratch(0, static_cast<size_t>(chunks) * c);
  std::fill(partial, partial + static_cast<size_t>(chunks) * c, 0.f);
  ParallelChunks(n, chunks, [&](int chunk, int64_t begin, int64_t end) {
    float* pg = partial + static_cast<size_t>(chunk) * c;
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * c;
      const float* dyr = dy + r * c;
      const float s = rstd[r];
      float sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t j = 0; j < c; ++j) sum_gx += dyr[j] * gamma[j] * xr[j] * s;
      const float mean_gx = sum_gx / c;
      for (int64_t j = 0; j < c; ++j) {
        const float xhat = xr[j] * s;
        pg[j] += dyr[j] * xhat;
        if (dx) dx[r * c + j] += s * (dyr[j] * gamma[j] - xhat * mean_gx);
      }
    }
  });
  if (dgamma)
    for (int k = 0; k < chunks; ++k)
      for (int64_t j = 0; j < c; ++j) dgamma[j] += partial[static_cast<size_t>(k) * c + j];
  return OkStatus();
}

const bool kRegistered = RegisterKernel("rmsnorm", Device::kCpu, DType::kF32, {Forward, Backward});

}  // namespace
}  // namespace ds::kernels::cpu
