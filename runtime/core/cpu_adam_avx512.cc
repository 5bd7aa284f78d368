// AVX-512 lanes for cpu_adam_simd.h (compiled with -mavx512f -mavx512bw -ffp-contract=off).
#include <immintrin.h>

// GCC 12's avx512fintrin.h writes its "undefined" vectors as `__m512 __Y = __Y;`, which
// -Wuninitialized reports at every use of an intrinsic built on one (a false positive of the
// header, not of this file): silenced here so that a real warning stands out.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "runtime/core/cpu_adam_simd.h"

namespace ds::internal {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  static F Set(float x) { return _mm512_set1_ps(x); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }  // a b + c, one rounding
  static F Neg(F a) { return _mm512_sub_ps(_mm512_setzero_ps(), a); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }

  template <DType T>
  static F LoadAs(const void* base, int64_t i) {
    if constexpr (T == DType::kF32) return Load(static_cast<const float*>(base) + i);
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (T == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }

  // FloatToBf16 / FloatToF16 (runtime/core/dtype.h), 16 at a time.
  template <DType T>
  static void StoreAs(void* base, int64_t i, F x) {
    if constexpr (T == DType::kF32) return Store(static_cast<float*>(base) + i, x);
    auto* out = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i);
    if constexpr (T == DType::kF16)
      return _mm256_storeu_si256(out, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(out, _mm512_cvtepi32_epi16(r));
  }
};

}  // namespace

void AdamAvx512(const AdamRun& r) { AdamFor<Avx512>(r); }
void SgdAvx512(const SgdRun& r) { SgdFor<Avx512>(r); }

}  // namespace ds::internal
