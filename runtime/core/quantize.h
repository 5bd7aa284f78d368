// Block quantization for ZeRO++'s compressed collectives (failures-zeropp-bf16.md B3, B5): qwZ
// gathers parameters as int8, qgZ reduces gradients as int4. Symmetric, one fp32 scale per block
// of `block` consecutive values:
//
//   scale = max |x| over the block / qmax        (qmax 127 for int8, 7 for int4; 0 for a block
//   q     = round-to-nearest-even(x * (qmax / max |x|))    of zeros, whose values are all 0)
//   x'    = q * scale
//
// so every value comes back within half a step: |x - x'| <= scale / 2 (plus the fp32 rounding of
// the product). A block holding an inf comes back as nan (scale nan), so an overflow check after
// the collective still sees it; a nan in the input is not guaranteed to survive (check before).
// int8 values are one byte each; int4 values two to a byte, the even element in the low nibble, as
// two's complement (-7 .. 7). The last block may be shorter. Where the CPU has AVX-512
// (runtime/core/cpu_isa.h) 16 values go at a time, else AVX2's 8; every path gives the same bits
// (the same products and rounding), so ranks on different CPUs agree.
//
//   QuantSpec s{8, 2048};
//   std::vector<int8_t> q(QuantizedValueBytes(n, s));
//   std::vector<float> scales(QuantBlocks(n, s));
//   Quantize(x, n, s, q.data(), scales.data());
//   Dequantize(q.data(), scales.data(), n, s, y);
#pragma once

#include <cstdint>

#include "runtime/base/status.h"

namespace ds {

struct QuantSpec {
  int bits = 8;          // 8 or 4
  int64_t block = 2048;  // values per scale; even for int4
};

// InvalidArgument naming the field for bits other than 4 / 8 or a block < 1 (odd, for int4).
Status CheckQuantSpec(const QuantSpec& s);

inline int64_t QuantBlocks(int64_t n, const QuantSpec& s) { return (n + s.block - 1) / s.block; }
inline int64_t QuantizedValueBytes(int64_t n, const QuantSpec& s) {
  return s.bits == 8 ? n : (n + 1) / 2;
}
// Values and scales together: what a quantized collective sends for n values.
inline int64_t QuantizedBytes(int64_t n, const QuantSpec& s) {
  return QuantizedValueBytes(n, s) + QuantBlocks(n, s) * static_cast<int64_t>(sizeof(float));
}

// x: n fp32 values (or bf16, as uint16_t bits); q: QuantizedValueBytes(n) bytes; scales:
// QuantBlocks(n) floats. The spec must pass CheckQuantSpec.
void Quantize(const float* x, int64_t n, const QuantSpec& s, int8_t* q, float* scales);
void QuantizeBf16(const uint16_t* x, int64_t n, const QuantSpec& s, int8_t* q, float* scales);

// y = q * scale, n values, in fp32 (or rounded once to bf16).
void Dequantize(const int8_t* q, const float* scales, int64_t n, const QuantSpec& s, float* y);
void DequantizeBf16(const int8_t* q, const float* scales, int64_t n, const QuantSpec& s,
                    uint16_t* y);

}  // namespace ds
