// Element types and the 16-bit float conversions used by mixed precision.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ds {

enum class DType : uint8_t { kF32 = 1, kBF16 = 2, kF16 = 3, kI32 = 4, kI64 = 5, kU16 = 6 };

// Bytes per element.
size_t DTypeSize(DType t);
// "f32", "bf16", "f16", "i32", "i64", "u16".
const char* DTypeName(DType t);
// Parses the names above (and "float32", "bfloat16", "float16"); false if unknown.
bool ParseDType(const std::string& name, DType* out);
inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// bf16: the upper half of an fp32, rounded to nearest even; NaN stays NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE half, round to nearest even; overflow gives inf (what loss scaling detects).
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

// Element i of a float buffer of type t (f32, bf16 or f16) as fp32, and back (rounded).
inline float LoadFloat(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return F16ToFloat(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}
inline void StoreFloat(void* data, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = FloatToBf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = FloatToF16(v);
      break;
    default:
      static_cast<float*>(data)[i] = v;
  }
}

// Bulk conversions (vectorized where the CPU allows).
void ConvertF32ToBf16(const float* src, uint16_t* dst, int64_t n);
void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n);
void ConvertF32ToF16(const float* src, uint16_t* dst, int64_t n);
void ConvertF16ToF32(const uint16_t* src, float* dst, int64_t n);
// The same on the calling thread, without an OpenMP region (whose entry costs more than a short
// run's conversion): for the chunks kernels convert inside their own parallel loops.
void RoundToBf16Run(const float* src, uint16_t* dst, int64_t n);
void WidenBf16Run(const uint16_t* src, float* dst, int64_t n);
// dst[i] = round(widen(dst[i]) + src[i]): fp32 values added into 16-bit ones (a mixed-precision
// executor's parameter gradients), bit for bit what the scalar conversions give.
void AddF32IntoBf16(const float* src, uint16_t* dst, int64_t n);
void AddF32IntoF16(const float* src, uint16_t* dst, int64_t n);

}  // namespace ds
