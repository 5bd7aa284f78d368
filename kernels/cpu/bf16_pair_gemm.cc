#include "kernels/cpu/bf16_pair_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/core/cpu_isa.h"

namespace ds::kernels::cpu {
namespace {

// GCC 12's avx512fintrin.h trips -Wuninitialized in its own "undefined" vectors
// (few_rows_gemm.cc says more).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One tile: R rows by NV 16-column vectors of C, accumulated over kp pairs in registers.
template <int R, int NV>
__attribute__((target("avx512f,avx512bf16"))) void Tile(int64_t kp, const uint32_t* a, int64_t ar,
                                                        int64_t aq, const uint32_t* b, int64_t ldb,
                                                        float* c, int64_t ldc, float alpha,
                                                        bool acc) {
  __m512 s[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (int64_t q = 0; q < kp; ++q) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + q * ldb + 16 * v));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh av =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r * ar + q * aq])));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_dpbf16_ps(s[r][v], av, bv[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* to = c + r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(s[r][v], al);
      if (acc) x = _mm512_add_ps(x, _mm512_loadu_ps(to));
      _mm512_storeu_ps(to, x);
    }
}

using TileFn = void (*)(int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t,
                        float*, int64_t, float, bool);

constexpr TileFn kTiles[4][4] = {
    {Tile<1, 1>, Tile<1, 2>, Tile<1, 3>, Tile<1, 4>},
    {Tile<2, 1>, Tile<2, 2>, Tile<2, 3>, Tile<2, 4>},
    {Tile<3, 1>, Tile<3, 2>, Tile<3, 3>, Tile<3, 4>},
    {Tile<4, 1>, Tile<4, 2>, Tile<4, 3>, Tile<4, 4>},
};

__attribute__((target("avx512f"))) void PairUp16(const uint16_t* x0, const uint16_t* x1, int64_t n,
                                                 uint32_t* dst) {
  for (int64_t c = 0; c < n; c += 16) {
    const __m512i lo =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + c)));
    const __m512i hi =
        x1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1 + c)))
           : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

#pragma GCC diagnostic pop

}  // namespace

bool Bf16PairGemmHere() { return HostCpuIsa() >= CpuIsa::kAvx512Bf16; }

void Bf16PairGemm(int64_t m, int64_t n, int64_t kp, PairRows a, const uint32_t* b, int64_t ldb,
                  float* c, int64_t ldc, float alpha, bool accumulate) {
  for (int64_t c0 = 0; c0 < n; c0 += 64) {  // a panel of B stays in L1 while the rows pass
    const int64_t nv = std::min<int64_t>(4, (n - c0) / 16);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
      const int64_t rows = std::min<int64_t>(4, m - r0);
      kTiles[rows - 1][nv - 1](kp, a.p + r0 * a.row, a.row, a.pair, b + c0, ldb, c + r0 * ldc + c0,
                               ldc, alpha, accumulate);
    }
  }
}

void PackRowPairs(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, int64_t tp,
                  uint32_t* dst) {
  for (int64_t q = 0; q < tp / 2; ++q) {
    uint32_t* to = dst + q * cols;
    const int64_t r = 2 * q;
    if (r >= rows) {
      std::memset(to, 0, static_cast<size_t>(cols) * 4);
      continue;
    }
    PairUp16(x + r * ld, r + 1 < rows ? x + (r + 1) * ld : nullptr, cols, to);
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

// r[16] rows of 16 words transposed in registers: r[c] becomes column c.
__attribute__((target("avx512f"))) inline void Transpose16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // 32-bit interleave within each 128-bit lane
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // 64-bit: each lane of u[4i + k] holds a 4x4 block's column k
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {  // 128-bit lanes: column 4 L + k from lane L of u[k + 4 i]
    const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88);
    const __m512i c = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xdd);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xdd);
    r[k] = _mm512_shuffle_i32x4(a, b, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(a, b, 0xdd);
    r[4 + k] = _mm512_shuffle_i32x4(c, d, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(c, d, 0xdd);
  }
}

}  // namespace

__attribute__((target("avx512f"))) void PackPairColumns(const uint16_t* x, int64_t ld, int64_t rows,
                                                        int64_t cols, int64_t tp, uint32_t* dst) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(x);  // ld even: rows start on words
  const int64_t pairs = cols / 2, ldw = ld / 2;
  for (int64_t r0 = 0; r0 < tp; r0 += 16) {  // 16 x 16 words at a time, transposed in registers
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      const int64_t n = std::min<int64_t>(16, pairs - p0);
      const __mmask16 k = static_cast<__mmask16>((1u << n) - 1);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = r0 + i < rows ? _mm512_maskz_loadu_epi32(k, words + (r0 + i) * ldw + p0)
                             : _mm512_setzero_si512();
      Transpose16(r);
      for (int64_t c = 0; c < n; ++c) _mm512_storeu_si512(dst + (p0 + c) * tp + r0, r[c]);
    }
  }
}
#pragma GCC diagnostic pop

}  // namespace ds::kernels::cpu
