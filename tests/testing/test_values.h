// Deterministic test data shared by the GPU tests: uniform floats from a 64-bit LCG (the same
// stream on every machine and compiler) and their rounding to a 16-bit float type, so that a
// CPU reference sees exactly the values the device was given.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/dtype.h"

namespace ds::testing {

// `n` values uniform in [lo, hi) from `seed`.
inline std::vector<float> RandomValues(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<float>((s >> 40) * (1.0 / (1ull << 24)));
  }
  return v;
}

// `v` rounded to what `t` holds (bf16, f16; f32 unchanged).
inline std::vector<float> RoundedTo(std::vector<float> v, DType t) {
  for (float& x : v) {
    if (t == DType::kBF16) x = Bf16ToFloat(FloatToBf16(x));
    if (t == DType::kF16) x = F16ToFloat(FloatToF16(x));
  }
  return v;
}

}  // namespace ds::testing
