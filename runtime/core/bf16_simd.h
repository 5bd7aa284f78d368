// bf16 <-> fp32 on 16 lanes, in registers, for code that checked the CPU has AVX-512 (dtype.cc's
// bulk conversions, and kernel loops that widen, compute and round in one pass). Rounding is to
// nearest even with NaN kept quiet, by integer operations: FloatToBf16's bits (vcvtne2ps2bf16
// would flush denormals).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ds::bf16_simd {

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) inline __m512 Load16(const uint16_t* src) {
  const __m512i h =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

// v rounded to bf16, each value's 16 bits in the low half of its 32-bit lane (the high half 0).
__attribute__((target("avx512f"))) inline __m512i Round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, r, quiet);
}

__attribute__((target("avx512f"))) inline void Store16(__m512 v, uint16_t* dst) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(Round16(v)));
}

#pragma GCC diagnostic pop

}  // namespace ds::bf16_simd
