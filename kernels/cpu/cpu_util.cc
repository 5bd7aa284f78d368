#include "kernels/cpu/cpu_util.h"

#include "kernels/cpu/exp_simd.h"
#include "kernels/cpu/few_rows_gemm.h"

#include <cblas.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>

namespace ds::kernels::cpu {

float* ThreadScratch(int slot, size_t floats) {
  constexpr int kSlots = 4;
  thread_local std::vector<float> buffers[kSlots];
  std::vector<float>& buf = buffers[slot % kSlots];
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

namespace {}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C; BLAS would reject lda = 0.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  if (m <= 8 && !trans_a && trans_b && k >= 64 && (m > 1 || FewRowsVectorized())) {
    FewRowsGemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // a decode step's linears
    return;
  }
  if (m == 1) {  // one row: OpenBLAS's gemv streams B about 4x faster than its gemm
    const blasint inc = trans_a ? static_cast<blasint>(lda) : 1;  // a's k values
    if (trans_b)                                                  // c[1, n] = a B^T, B [n, k]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
                  alpha, b, static_cast<blasint>(ldb), a, inc, beta, c, 1);
    else  // c[1, n] = a B, B [k, n]
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(n),
                  alpha, b, static_cast<blasint>(ldb), a, inc, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void ParallelSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  constexpr int64_t kPanel = 16;                  // panel edges are multiples of this
  constexpr double kMinFlopsPerThread = 1 << 21;  // below ~2 MFLOP a fork costs more
  const bool split_rows = m >= n;
  const int64_t panels = ((split_rows ? m : n) + kPanel - 1) / kPanel;
  const int threads = std::min<int64_t>(
      PlannedThreads(panels, 1),
      std::max<int64_t>(1, static_cast<int64_t>(2.0 * m * n * k / kMinFlopsPerThread)));
  BlasSingleThreadScope single_thread_blas;
  ParallelChunks(panels, threads, [&](int, int64_t begin, int64_t end) {
    const int64_t lo = begin * kPanel, hi = std::min(end * kPanel, split_rows ? m : n);
    if (split_rows) {  // rows [lo, hi) of op(A) and C
      Sgemm(trans_a, trans_b, hi - lo, n, k, alpha, trans_a ? a + lo : a + lo * lda, lda, b, ldb,
            beta, c + lo * ldc, ldc);
    } else {  // columns [lo, hi) of op(B) and C
      Sgemm(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, trans_b ? b + lo * ldb : b + lo, ldb,
            beta, c + lo, ldc);
    }
  });
}

BlasSingleThreadScope::BlasSingleThreadScope()
    : saved_threads_(omp_in_parallel() ? 1 : openblas_get_num_threads()) {
  if (saved_threads_ != 1) openblas_set_num_threads(1);
}

BlasSingleThreadScope::~BlasSingleThreadScope() {
  if (saved_threads_ != 1) openblas_set_num_threads(saved_threads_);
}

namespace {

using namespace exp_simd;  // NOLINT: the constants and Exp8 / Exp16

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The whole 16-float groups of ExpArray / ExpShiftSum; they return how many elements they did.
__attribute__((target("avx512f,fma"))) int64_t ExpArray16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Exp16(_mm512_loadu_ps(x + i)));
  return i;
}

__attribute__((target("avx512f,fma"))) int64_t ExpShiftSum16(const float* x, float* y, int64_t n,
                                                             float shift, float* sum) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  *sum += _mm512_reduce_add_ps(acc);
  return i;
}
#pragma GCC diagnostic pop
#else
float ExpScalar(float x) {
  if (std::isnan(x)) return x;
  x = std::min(kExpHi, std::max(kExpLo, x));
  float fx = std::nearbyint(x * kLog2e);
  float r = std::fma(-fx, kLn2Hi, x);
  r = std::fma(-fx, kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r + 1.f);
  return std::ldexp(p, static_cast<int>(fx));
}
#endif

}  // namespace

void ExpArray(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if (CpuHasAvx512()) i = ExpArray16(x, y, n);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {  // Tail through the same polynomial, so every element rounds alike.
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tmp, x + i, (n - i) * sizeof(float));
    _mm256_store_ps(tmp, Exp8(_mm256_load_ps(tmp)));
    std::memcpy(y + i, tmp, (n - i) * sizeof(float));
  }
#else
  for (; i < n; ++i) y[i] = ExpScalar(x[i]);
#endif
}

float ExpShiftSum(const float* x, float* y, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(__AVX2__) && defined(__FMA__)
  if (CpuHasAvx512()) i = ExpShiftSum16(x, y, n, shift, &sum);
#endif
  ExpShiftSumRest(x, y, i, n, shift, &sum);
  return sum;
}

void ExpShiftSumRest(const float* x, float* y, int64_t i, int64_t n, float shift, float* total) {
  float sum = *total;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float v : lanes) sum += v;
  if (i < n) {
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = i; j < n; ++j) tmp[j - i] = x[j] - shift;
    _mm256_store_ps(tmp, Exp8(_mm256_load_ps(tmp)));
    for (int64_t j = i; j < n; ++j) {
      y[j] = tmp[j - i];
      sum += tmp[j - i];
    }
  }
#else
  for (; i < n; ++i) {
    y[i] = ExpScalar(x[i] - shift);
    sum += y[i];
  }
#endif
  *total = sum;
}

float MaxArray(const float* x, int64_t n) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
#if defined(__AVX2__)
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vm);
    for (float v : lanes) m = std::max(m, v);
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

}  // namespace ds::kernels::cpu
