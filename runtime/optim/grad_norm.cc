#include "runtime/optim/grad_norm.h"

#include <algorithm>
#include <cmath>

namespace ds {

GradNorm ComputeGradNorm(const ParamStore& params, float inv_loss_scale) {
  const int64_t n = params.total_elements();  // padding is zero and adds nothing
  const DType t = params.model_dtype();
  const void* g = params.grads();
  double sum = 0;
  if (t == DType::kF32) {
    const float* f = static_cast<const float*>(g);
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(f[i]) * f[i];
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(g);
    const bool bf16 = t == DType::kBF16;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      double v = bf16 ? Bf16ToFloat(h[i]) : F16ToFloat(h[i]);
      sum += v * v;
    }
  }
  GradNorm r;
  r.norm = std::sqrt(sum) * inv_loss_scale;
  r.finite = std::isfinite(r.norm);
  return r;
}

float ClipCoefficient(double norm, float max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

}  // namespace ds
