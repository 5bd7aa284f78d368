#include "runtime/core/dtype.h"

#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

namespace ds {
namespace {

TEST_CASE("DType: bf16 rounds to nearest even and keeps NaN", "[core]") {
  CHECK(Bf16ToFloat(FloatToBf16(1.0f)) == 1.0f);
  CHECK(Bf16ToFloat(FloatToBf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
  CHECK(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  CHECK(Bf16ToFloat(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("DType: fp16 overflows to inf and round-trips", "[core]") {
  CHECK(F16ToFloat(FloatToF16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(F16ToFloat(FloatToF16(70000.0f))));
  std::vector<float> x = {0.1f, -3.0f, 1e-3f, 512.25f, 7.0f, 8.0f, 9.5f, -0.0f, 42.0f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> y(x.size());
  ConvertF32ToF16(x.data(), h.data(), x.size());
  ConvertF16ToF32(h.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == Approx(x[i]).epsilon(1e-3));
}

}  // namespace
}  // namespace ds
