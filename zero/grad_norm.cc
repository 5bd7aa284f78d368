#include "zero/grad_norm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ds::zero {

double GradSquaredSum(const ParamStore& params, int64_t begin, int64_t end) {
  return SquaredSum(params.grads(), params.model_dtype(), begin, end);
}

namespace {

// Sum of squares of 8 widened values into four double lanes (two FMAs).
inline __m256d AddSquares(__m256 x, __m256d acc) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  return _mm256_fmadd_pd(hi, hi, _mm256_fmadd_pd(lo, lo, acc));
}

inline __m256 Load8(const void* g, DType t, int64_t i) {
  if (t == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(g) + i);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + i));
  if (t == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// [begin, end) in doubles: two independent vector accumulators (an FMA's latency would bound
// one), then the scalar tail.
double BlockSquares(const void* g, DType t, int64_t begin, int64_t end) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    a0 = AddSquares(Load8(g, t, i), a0);
    a1 = AddSquares(Load8(g, t, i + 8), a1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < end; ++i) {
    const double v = LoadFloat(g, t, i);
    sum += v * v;
  }
  return sum;
}

}  // namespace

// Blocks of 64K elements summed in vector lanes, the blocks' sums added in order: the same
// value for any number of threads.
double SquaredSum(const void* g, DType t, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (end - begin + kBlock - 1) / kBlock;
  if (blocks <= 1) return end > begin ? BlockSquares(g, t, begin, end) : 0.0;
  std::vector<double> sums(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    sums[b] = BlockSquares(g, t, begin + b * kBlock, std::min(end, begin + (b + 1) * kBlock));
  double sum = 0;
  for (double s : sums) sum += s;
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
