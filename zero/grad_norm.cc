#include "zero/grad_norm.h"

#include <algorithm>
#include <cmath>

namespace ds::zero {

double GradSquaredSum(const ParamStore& params, int64_t begin, int64_t end) {
  return SquaredSum(params.grads(), params.model_dtype(), begin, end);
}

double SquaredSum(const void* g, DType t, int64_t begin, int64_t end) {
  double sum = 0;
  if (t == DType::kF32) {
    const float* f = static_cast<const float*>(g);
#pragma omp parallel for reduction(+ : sum) schedule(static) if (end - begin > (1 << 16))
    for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(f[i]) * f[i];
  } else {
#pragma omp parallel for reduction(+ : sum) schedule(static) if (end - begin > (1 << 16))
    for (int64_t i = begin; i < end; ++i) {
      double v = LoadFloat(g, t, i);
      sum += v * v;
    }
  }
  return sum;
}

GradNorm ComputeGradNorm(const ParamStore& params, float inv_loss_scale) {
  // Padding is zero and adds nothing.
  GradNorm r;
  r.norm = std::sqrt(GradSquaredSum(params, 0, params.total_elements())) * inv_loss_scale;
  r.finite = std::isfinite(r.norm);
  return r;
}

float ClipCoefficient(double norm, float max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

}  // namespace ds::zero
