// The exponential the CPU kernels share (ExpArray, ExpShiftSum, the fused bf16 loops of the
// activations and cross-entropy): Cephes expf. exp(x) = 2^n * exp(r), n = round(x / ln2),
// r = x - n ln2 with ln2 split in two so r is exact; exp(r) on [-ln2/2, ln2/2] by a degree-7
// polynomial. Exp8 (AVX2) and Exp16 (AVX-512, for callers that checked CpuHasAvx512) do the same
// operations, so an element's bits do not depend on the lane count.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace ds::kernels::cpu::exp_simd {

constexpr float kExpHi = 88.3762626647949f;
constexpr float kExpLo = -87.3365447505531f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500E-4f, kP1 = 1.3981999507E-3f, kP2 = 8.3334519073E-3f;
constexpr float kP3 = 4.1665795894E-2f, kP4 = 1.6666665459E-1f, kP5 = 5.0000001201E-1f;

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 Exp8(__m256 x) {
  // min/max return their second operand when either is NaN: x second keeps NaN.
  x = _mm256_min_ps(_mm256_set1_ps(kExpHi), x);
  x = _mm256_max_ps(_mm256_set1_ps(kExpLo), x);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  __m256i n = _mm256_cvtps_epi32(fx);
  // n in [-126, 128]: build 2^n in two halves so n = 128 does not overflow the exponent.
  __m256i half = _mm256_srai_epi32(n, 1);
  __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors
// (few_rows_gemm.cc says more).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Exp8 on 16 lanes, where the CPU has AVX-512: the same operations, so every element rounds
// alike on either path (only ExpShiftSum's order of summing differs).
__attribute__((target("avx512f,fma"))) inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(kExpHi), x);
  x = _mm512_max_ps(_mm512_set1_ps(kExpLo), x);
  __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512i n = _mm512_cvtps_epi32(fx);
  const __m512i half = _mm512_srai_epi32(n, 1);
  const __m512 s1 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
  const __m512 s2 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(n, half), _mm512_set1_epi32(127)), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}
#pragma GCC diagnostic pop
#endif

}  // namespace ds::kernels::cpu::exp_simd
