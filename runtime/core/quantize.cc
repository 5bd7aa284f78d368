#include "runtime/core/quantize.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/core/cpu_isa.h"
#include "runtime/core/dtype.h"

namespace ds {
namespace {

constexpr int64_t kChunk = 256;  // values widened or unpacked at a time

// max |x[i]| over n values (exact: max is).
__attribute__((target("avx512f"))) float AbsMax16(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
  m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail, x + i)));
  return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx2"))) float AbsMax8(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float best = 0.f;
  for (float v : lanes) best = std::max(best, v);
  for (; i < n; ++i) best = std::max(best, std::fabs(x[i]));
  return best;
}

// q[i] = nearest-even(x[i] * inv) as int8 (|x * inv| <= qmax, so nothing saturates).
__attribute__((target("avx512f,avx512bw"))) void Scale16(const float* x, int64_t n, float inv,
                                                         int8_t* q) {
  const __m512 f = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(q + i),
        _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), f))));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
  const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), f);
  _mm512_mask_cvtsepi32_storeu_epi8(q + i, tail, _mm512_cvtps_epi32(v));
}

__attribute__((target("avx2"))) void Scale8(const float* x, int64_t n, float inv, int8_t* q) {
  const __m256 f = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), f));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) q[i] = static_cast<int8_t>(std::lrintf(x[i] * inv));
}

// y[i] = q[i] * scale.
__attribute__((target("avx512f"))) void Unscale16(const int8_t* q, int64_t n, float scale,
                                                  float* y) {
  const __m512 f = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i v =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_cvtepi32_ps(v), f));
  }
  for (; i < n; ++i) y[i] = static_cast<float>(q[i]) * scale;
}

__attribute__((target("avx2"))) void Unscale8(const int8_t* q, int64_t n, float scale, float* y) {
  const __m256 f = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(v), f));
  }
  for (; i < n; ++i) y[i] = static_cast<float>(q[i]) * scale;
}

int QMax(const QuantSpec& s) { return s.bits == 8 ? 127 : 7; }

// One block of fp32 values: its scale, and its values as int8 (int4's still one per byte).
float QuantizeBlock(const float* x, int64_t n, int qmax, int8_t* q) {
  const bool wide = CpuHasAvx512();
  const float amax = wide ? AbsMax16(x, n) : AbsMax8(x, n);
  if (amax == 0.f || !std::isfinite(amax)) {  // zeros; or an inf, whose scale makes every
    std::fill(q, q + n, int8_t{0});           // value of the block nan on the way back
    return amax == 0.f ? 0.f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = static_cast<float>(qmax) / amax;
  if (wide)
    Scale16(x, n, inv, q);
  else
    Scale8(x, n, inv, q);
  return amax / static_cast<float>(qmax);
}

void Unscale(const int8_t* q, int64_t n, float scale, float* y) {
  if (CpuHasAvx512())
    Unscale16(q, n, scale, y);
  else
    Unscale8(q, n, scale, y);
}

// Two's-complement nibbles, the even element low.
void PackNibbles(const int8_t* v, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint8_t lo = static_cast<uint8_t>(v[i]) & 0xF;
    const uint8_t hi = i + 1 < n ? static_cast<uint8_t>(v[i + 1]) & 0xF : 0;
    out[i / 2] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void UnpackNibbles(const uint8_t* in, int64_t n, int8_t* v) {
  for (int64_t i = 0; i < n; ++i) {
    const int nib = (in[i / 2] >> (i % 2 * 4)) & 0xF;
    v[i] = static_cast<int8_t>(nib >= 8 ? nib - 16 : nib);
  }
}

// Quantizes block b of `n` values read through `load` (fp32 values of [at, at + m) into buf).
template <class Load>
void QuantizeAll(int64_t n, const QuantSpec& s, int8_t* q, float* scales, Load load) {
  std::vector<float> buf(static_cast<size_t>(s.block));
  std::vector<int8_t> vals(static_cast<size_t>(s.block));
  for (int64_t b = 0; b * s.block < n; ++b) {
    const int64_t at = b * s.block, m = std::min(s.block, n - at);
    const float* x = load(at, m, buf.data());
    if (s.bits == 8) {
      scales[b] = QuantizeBlock(x, m, QMax(s), q + at);
    } else {
      scales[b] = QuantizeBlock(x, m, QMax(s), vals.data());
      PackNibbles(vals.data(), m, reinterpret_cast<uint8_t*>(q) + at / 2);
    }
  }
}

// Dequantizes every block, handing each chunk of fp32 values [at, at + m) to `store`.
template <class Store>
void DequantizeAll(const int8_t* q, const float* scales, int64_t n, const QuantSpec& s,
                   Store store) {
  float out[kChunk];
  int8_t vals[kChunk];
  for (int64_t b = 0; b * s.block < n; ++b) {
    const int64_t begin = b * s.block, end = std::min(n, begin + s.block);
    for (int64_t at = begin; at < end; at += kChunk) {
      const int64_t m = std::min(kChunk, end - at);
      const int8_t* src = q + at;
      if (s.bits == 4) {  // a block is even, so a chunk starts on a whole byte
        UnpackNibbles(reinterpret_cast<const uint8_t*>(q) + at / 2, m, vals);
        src = vals;
      }
      Unscale(src, m, scales[b], out);
      store(at, m, out);
    }
  }
}

}  // namespace

Status CheckQuantSpec(const QuantSpec& s) {
  if (s.bits != 8 && s.bits != 4)
    return InvalidArgumentError("quantization bits " + std::to_string(s.bits) +
                                ": only 8 (qwZ) and 4 (qgZ) are implemented");
  if (s.block < 1 || (s.bits == 4 && s.block % 2 != 0))
    return InvalidArgumentError(
        "quantization block " + std::to_string(s.block) +
        (s.bits == 4 ? " must be even and positive for int4" : " must be positive"));
  return OkStatus();
}

void Quantize(const float* x, int64_t n, const QuantSpec& s, int8_t* q, float* scales) {
  QuantizeAll(n, s, q, scales, [x](int64_t at, int64_t, float*) { return x + at; });
}

void QuantizeBf16(const uint16_t* x, int64_t n, const QuantSpec& s, int8_t* q, float* scales) {
  QuantizeAll(n, s, q, scales, [x](int64_t at, int64_t m, float* buf) {
    WidenBf16Run(x + at, buf, m);
    return static_cast<const float*>(buf);
  });
}

void Dequantize(const int8_t* q, const float* scales, int64_t n, const QuantSpec& s, float* y) {
  DequantizeAll(q, scales, n, s,
                [y](int64_t at, int64_t m, const float* v) { std::copy(v, v + m, y + at); });
}

void DequantizeBf16(const int8_t* q, const float* scales, int64_t n, const QuantSpec& s,
                    uint16_t* y) {
  DequantizeAll(q, scales, n, s,
                [y](int64_t at, int64_t m, const float* v) { RoundToBf16Run(v, y + at, m); });
}

}  // namespace ds
