// AVX2 + F16C lanes for cpu_adam_simd.h (compiled with -mavx2 -mf16c -mfma -ffp-contract=off).
#include <immintrin.h>

#include "runtime/core/cpu_adam_simd.h"

namespace ds::internal {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int kLanes = 8;
  static F Set(float x) { return _mm256_set1_ps(x); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }  // a b + c, one rounding
  static F Neg(F a) { return _mm256_sub_ps(_mm256_setzero_ps(), a); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }

  template <DType T>
  static F LoadAs(const void* base, int64_t i) {
    if constexpr (T == DType::kF32) return Load(static_cast<const float*>(base) + i);
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (T == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }

  // FloatToBf16 / FloatToF16 (runtime/core/dtype.h), 8 at a time.
  template <DType T>
  static void StoreAs(void* base, int64_t i, F x) {
    if constexpr (T == DType::kF32) return Store(static_cast<float*>(base) + i, x);
    auto* out = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i);
    if constexpr (T == DType::kF16)
      return _mm_storeu_si128(out, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)),
                           nan);
    // Every lane is <= 0xffff: unsigned saturation packs exactly.
    _mm_storeu_si128(out,
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
};

}  // namespace

void AdamAvx2(const AdamRun& r) { AdamFor<Avx2>(r); }
void SgdAvx2(const SgdRun& r) { SgdFor<Avx2>(r); }

}  // namespace ds::internal
