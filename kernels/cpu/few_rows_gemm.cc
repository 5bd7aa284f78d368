#include "kernels/cpu/few_rows_gemm.h"

#include <immintrin.h>

#include "kernels/cpu/cpu_util.h"

// GCC 12's avx512fintrin.h writes its "undefined" vectors as `__m512 __Y = __Y;`, which
// -Wuninitialized reports at every use of an intrinsic built on one (a false positive of the
// header, not of this file): silenced here so that a real warning stands out.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds::kernels::cpu {
namespace {

struct Out {
  float alpha, beta;
  float* c;
  int64_t ldc;
  void Put(int64_t i, int64_t j, float sum) const {
    float& out = c[i * ldc + j];
    out = beta == 0.f ? alpha * sum : alpha * sum + beta * out;
  }
};

__attribute__((target("avx512f"))) inline __mmask16 Mask(int64_t left) {
  return left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
}

// R (1 to 4) rows of A from row i against rows j and j + 1 of B in one pass over k, the 2R sums
// in named registers (an array of them is stored to the stack at every step); `cols` 1: row j
// only (b1 = b0, its sums dropped).
template <int R>
__attribute__((target("avx512f,fma"))) void Pass(int64_t k, const float* a, int64_t lda,
                                                 const float* b0, const float* b1, int64_t i,
                                                 int64_t j, int cols, const Out& out,
                                                 const float* next) {
  __m512 s00 = _mm512_setzero_ps(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00,
         s30 = s00, s31 = s00;
  const float* x0 = a + i * lda;
  const float *x1 = x0 + lda, *x2 = x1 + lda, *x3 = x2 + lda;
  for (int64_t t = 0; t < k; t += 16) {
    const __mmask16 m = Mask(k - t);
    if (next) {  // the next two rows of B into L2, one pass ahead (L1 holds the rows of A)
      _mm_prefetch(reinterpret_cast<const char*>(next + t), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(next + k + t), _MM_HINT_T1);
    }
    const __m512 w0 = _mm512_maskz_loadu_ps(m, b0 + t), w1 = _mm512_maskz_loadu_ps(m, b1 + t);
    __m512 x = _mm512_maskz_loadu_ps(m, x0 + t);
    s00 = _mm512_fmadd_ps(x, w0, s00), s01 = _mm512_fmadd_ps(x, w1, s01);
    if constexpr (R > 1) {
      x = _mm512_maskz_loadu_ps(m, x1 + t);
      s10 = _mm512_fmadd_ps(x, w0, s10), s11 = _mm512_fmadd_ps(x, w1, s11);
    }
    if constexpr (R > 2) {
      x = _mm512_maskz_loadu_ps(m, x2 + t);
      s20 = _mm512_fmadd_ps(x, w0, s20), s21 = _mm512_fmadd_ps(x, w1, s21);
    }
    if constexpr (R > 3) {
      x = _mm512_maskz_loadu_ps(m, x3 + t);
      s30 = _mm512_fmadd_ps(x, w0, s30), s31 = _mm512_fmadd_ps(x, w1, s31);
    }
  }
  const __m512 sums[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < cols; ++c) out.Put(i + r, j + c, _mm512_reduce_add_ps(sums[r][c]));
}

// Every row of A against two rows of B at a time: rows of A four at a time, the later groups
// reading those two rows of B from L1.
__attribute__((target("avx512f,fma"))) void Rows512(int64_t m, int64_t n, int64_t k, const float* a,
                                                    int64_t lda, const float* b, int64_t ldb,
                                                    const Out& out) {
  for (int64_t j = 0; j < n; j += 2) {
    const int cols = j + 1 < n ? 2 : 1;
    const float* b0 = b + j * ldb;
    const float* b1 = cols == 2 ? b0 + ldb : b0;
    // The first group prefetches the next two rows (contiguous when ldb is k).
    const float* next = j + 3 < n && ldb == k ? b0 + 2 * ldb : nullptr;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4, next = nullptr) Pass<4>(k, a, lda, b0, b1, i, j, cols, out, next);
    if (m - i == 3) Pass<3>(k, a, lda, b0, b1, i, j, cols, out, next);
    if (m - i == 2) Pass<2>(k, a, lda, b0, b1, i, j, cols, out, next);
    if (m - i == 1) Pass<1>(k, a, lda, b0, b1, i, j, cols, out, next);
  }
}

// Rows of B four at a time against rows of A two at a time (compiled for AVX2 by the build).
void FewRowsPortable(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, const Out& out) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float *b0 = b + j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      const float *x = a + i * lda, *y = x + lda;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0, r0 = 0, r1 = 0, r2 = 0, r3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, r0, r1, r2, r3)
      for (int64_t t = 0; t < k; ++t) {
        const float w0 = b0[t], w1 = b1[t], w2 = b2[t], w3 = b3[t];
        s0 += x[t] * w0, s1 += x[t] * w1, s2 += x[t] * w2, s3 += x[t] * w3;
        r0 += y[t] * w0, r1 += y[t] * w1, r2 += y[t] * w2, r3 += y[t] * w3;
      }
      out.Put(i, j, s0), out.Put(i, j + 1, s1), out.Put(i, j + 2, s2), out.Put(i, j + 3, s3);
      out.Put(i + 1, j, r0), out.Put(i + 1, j + 1, r1), out.Put(i + 1, j + 2, r2);
      out.Put(i + 1, j + 3, r3);
    }
    for (; i < m; ++i) {
      const float* x = a + i * lda;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int64_t t = 0; t < k; ++t)
        s0 += x[t] * b0[t], s1 += x[t] * b1[t], s2 += x[t] * b2[t], s3 += x[t] * b3[t];
      out.Put(i, j, s0), out.Put(i, j + 1, s1), out.Put(i, j + 2, s2), out.Put(i, j + 3, s3);
    }
  }
  for (; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < k; ++t) sum += a[i * lda + t] * b[j * ldb + t];
      out.Put(i, j, sum);
    }
}

}  // namespace

bool FewRowsVectorized() { return CpuHasAvx512(); }

void FewRowsGemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Out out{alpha, beta, c, ldc};
  if (!FewRowsVectorized()) return FewRowsPortable(m, n, k, a, lda, b, ldb, out);
  Rows512(m, n, k, a, lda, b, ldb, out);
}

}  // namespace ds::kernels::cpu
