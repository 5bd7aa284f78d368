#include "kernels/cpu/attention_fused_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/exp_simd.h"
#include "runtime/core/bf16_simd.h"

namespace ds::kernels::cpu::fused_rows {
namespace {

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors
// (few_rows_gemm.cc says more).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Lanes [j, j + 16) that are below n.
__attribute__((target("avx512f"))) inline __mmask16 Below(int64_t j, int64_t n) {
  const int64_t left = n - j;
  return left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}

__attribute__((target("avx512f"))) inline void Store16(__m512i words, uint16_t* dst) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(words));
}

}  // namespace

__attribute__((target("avx512f,fma"))) float SoftmaxRow(float* s, int64_t n, int64_t nk,
                                                        uint16_t* p) {
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += 16)
    mx = _mm512_mask_max_ps(mx, Below(j, n), mx, _mm512_loadu_ps(s + j));
  const float top = _mm512_reduce_max_ps(mx);
  const __m512 shift = _mm512_set1_ps(top);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = Below(j, n);
    const __m512 e =
        _mm512_maskz_mov_ps(k, exp_simd::Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), shift)));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  const float total = _mm512_reduce_add_ps(sum);
  const __m512 inv = _mm512_set1_ps(1.f / total);
  for (int64_t j = 0; j < nk; j += 16) {
    const __mmask16 k = Below(j, n);
    const __m512 x = _mm512_maskz_mul_ps(k, _mm512_maskz_loadu_ps(k, s + j), inv);
    Store16(bf16_simd::Round16(x), p + j);
  }
  return top + std::log(total);
}

namespace {

// One row's 16 values at j: P and dS, 0 past the row's keys (an absent row: 0).
struct PdS {
  __m512 p, ds;
};

__attribute__((target("avx512f,fma"))) inline PdS GradAt(const GradRow* r, int64_t j) {
  if (!r) return {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __mmask16 k = Below(j, r->n);
  if (!k) return {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512 s = _mm512_maskz_loadu_ps(k, r->s + j);
  const __m512 p =
      _mm512_maskz_mov_ps(k, exp_simd::Exp16(_mm512_sub_ps(s, _mm512_set1_ps(r->lse))));
  const __m512 dp = _mm512_maskz_loadu_ps(k, r->dp + j);
  return {p, _mm512_mul_ps(p, _mm512_sub_ps(dp, _mm512_set1_ps(r->dot)))};
}

}  // namespace

__attribute__((target("avx512f,fma"))) void SoftmaxGradRowPair(const GradRow& r0, const GradRow* r1,
                                                               int64_t nk, uint32_t* p_pairs,
                                                               uint32_t* ds_pairs) {
  for (int64_t j = 0; j < nk; j += 16) {
    const PdS a = GradAt(&r0, j), b = GradAt(r1, j);
    const __m512i pa = bf16_simd::Round16(a.p), pb = bf16_simd::Round16(b.p);
    const __m512i da = bf16_simd::Round16(a.ds), db = bf16_simd::Round16(b.ds);
    _mm512_storeu_si512(p_pairs + j, _mm512_or_si512(pa, _mm512_slli_epi32(pb, 16)));
    _mm512_storeu_si512(ds_pairs + j, _mm512_or_si512(da, _mm512_slli_epi32(db, 16)));
    Store16(da, r0.ds + j);
    if (r1) Store16(db, r1->ds + j);
  }
}

__attribute__((target("avx512f,fma"))) float DotBf16(const uint16_t* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16)
    acc = _mm512_fmadd_ps(bf16_simd::Load16(a + j), _mm512_loadu_ps(b + j), acc);
  return _mm512_reduce_add_ps(acc);
}

#pragma GCC diagnostic pop

}  // namespace ds::kernels::cpu::fused_rows
