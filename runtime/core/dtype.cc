#include "runtime/core/dtype.h"

#include <immintrin.h>

#include <algorithm>

#include "runtime/core/bf16_simd.h"
#include "runtime/core/cpu_isa.h"

namespace ds {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU16:
      return "u16";
  }
  return "?";
}

bool ParseDType(const std::string& n, DType* out) {
  if (n == "f32" || n == "float32" || n == "fp32" || n == "F32")
    *out = DType::kF32;
  else if (n == "bf16" || n == "bfloat16" || n == "BF16")
    *out = DType::kBF16;
  else if (n == "f16" || n == "float16" || n == "fp16" || n == "F16")
    *out = DType::kF16;
  else if (n == "i32" || n == "int32" || n == "I32")
    *out = DType::kI32;
  else if (n == "i64" || n == "int64" || n == "I64")
    *out = DType::kI64;
  else if (n == "u16" || n == "uint16" || n == "U16")
    *out = DType::kU16;
  else
    return false;
  return true;
}

uint16_t FloatToF16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
float F16ToFloat(uint16_t h) { return _cvtsh_ss(h); }

namespace {

// FloatToBf16 on 8 floats (AVX2): round to nearest even, NaN kept quiet, bit for bit.
inline void F32ToBf16x8(const float* src, uint16_t* dst) {
  const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  r = _mm256_srli_epi32(r, 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, quiet, nan);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

inline void Bf16ToF32x8(const uint16_t* src, float* dst) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  _mm256_storeu_ps(dst, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
}

// The 16-lane forms (bf16_simd.h) over memory.
__attribute__((target("avx512f"))) inline void F32ToBf16x16(const float* src, uint16_t* dst) {
  bf16_simd::Store16(_mm512_loadu_ps(src), dst);
}

__attribute__((target("avx512f"))) inline __m512 Bf16ToF32x16(const uint16_t* src) {
  return bf16_simd::Load16(src);
}

// The 16-float groups of [i, end) of each bulk conversion; they return where they stopped.
__attribute__((target("avx512f"))) int64_t F32ToBf16Run16(const float* src, uint16_t* dst,
                                                          int64_t i, int64_t end) {
  for (; i + 16 <= end; i += 16) F32ToBf16x16(src + i, dst + i);
  return i;
}

__attribute__((target("avx512f"))) int64_t Bf16ToF32Run16(const uint16_t* src, float* dst,
                                                          int64_t i, int64_t end) {
  for (; i + 16 <= end; i += 16) _mm512_storeu_ps(dst + i, Bf16ToF32x16(src + i));
  return i;
}

__attribute__((target("avx512f"))) int64_t AddIntoBf16Run16(const float* src, uint16_t* dst,
                                                            int64_t i, int64_t end) {
  alignas(64) float sum[16];
  for (; i + 16 <= end; i += 16) {
    _mm512_store_ps(sum, _mm512_add_ps(Bf16ToF32x16(dst + i), _mm512_loadu_ps(src + i)));
    F32ToBf16x16(sum, dst + i);
  }
  return i;
}

constexpr int64_t kConvertBlock = 1 << 14;  // elements per parallel task

}  // namespace

void RoundToBf16Run(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  if (CpuHasAvx512()) i = F32ToBf16Run16(src, dst, i, n);
  for (; i + 8 <= n; i += 8) F32ToBf16x8(src + i, dst + i);
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

void WidenBf16Run(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  if (CpuHasAvx512()) i = Bf16ToF32Run16(src, dst, i, n);
  for (; i + 8 <= n; i += 8) Bf16ToF32x8(src + i, dst + i);
  for (; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

void ConvertF32ToBf16(const float* src, uint16_t* dst, int64_t n) {
  const int64_t blocks = (n + kConvertBlock - 1) / kConvertBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * kConvertBlock;
    RoundToBf16Run(src + at, dst + at, std::min(n, at + kConvertBlock) - at);
  }
}

void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  const int64_t blocks = (n + kConvertBlock - 1) / kConvertBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * kConvertBlock;
    WidenBf16Run(src + at, dst + at, std::min(n, at + kConvertBlock) - at);
  }
}

void AddF32IntoBf16(const float* src, uint16_t* dst, int64_t n) {
  const int64_t blocks = (n + kConvertBlock - 1) / kConvertBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kConvertBlock);
    int64_t i = b * kConvertBlock;
    if (CpuHasAvx512()) i = AddIntoBf16Run16(src, dst, i, end);
    alignas(32) float sum[8];
    for (; i + 8 <= end; i += 8) {
      Bf16ToF32x8(dst + i, sum);
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), _mm256_loadu_ps(src + i)));
      F32ToBf16x8(sum, dst + i);
    }
    for (; i < end; ++i) dst[i] = FloatToBf16(Bf16ToFloat(dst[i]) + src[i]);
  }
}

void AddF32IntoF16(const float* src, uint16_t* dst, int64_t n) {
  const int64_t blocks = (n + kConvertBlock - 1) / kConvertBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kConvertBlock);
    int64_t i = b * kConvertBlock;
    for (; i + 8 <= end; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + i));
      const __m256 sum = _mm256_add_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(src + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < end; ++i) dst[i] = FloatToF16(F16ToFloat(dst[i]) + src[i]);
  }
}

void ConvertF32ToF16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = FloatToF16(src[i]);
}

void ConvertF16ToF32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
  }
  for (; i < n; ++i) dst[i] = F16ToFloat(src[i]);
}

}  // namespace ds
