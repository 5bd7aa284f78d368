#include "runtime/core/dtype.h"

#include <cmath>
#include <cstring>
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

// The vectorized bulk conversions equal the scalar ones bit for bit: ties, NaNs of both signs
// and payloads, infinities, values that round up into inf, subnormals, and lengths with tails.
TEST_CASE("DType: bulk bf16 conversions equal the scalar ones bit for bit", "[core]") {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffc12345u, 0x7f800001u,
                                0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u,
                                0x80007fffu, 0x00008000u, 0x3f7fffffu};
  uint64_t x = 88172645463325252ull;
  while (bits.size() < 100003) {  // xorshift: every exponent and mantissa
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bits.push_back(static_cast<uint32_t>(x));
  }
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> h(f.size());
  ConvertF32ToBf16(f.data(), h.data(), static_cast<int64_t>(f.size()));
  std::vector<float> back(f.size());
  ConvertBf16ToF32(h.data(), back.data(), static_cast<int64_t>(h.size()));
  int64_t bad = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    bad += h[i] != FloatToBf16(f[i]);
    const float want = Bf16ToFloat(h[i]);
    bad += std::memcmp(&back[i], &want, 4) != 0;
  }
  CHECK(bad == 0);
  // Added into: every 16-, 8- and 1-element path against the scalar sum.
  std::vector<float> add(f.size());
  for (size_t i = 0; i < add.size(); ++i) add[i] = static_cast<float>(i % 97) * 0.0137f - 0.5f;
  std::vector<uint16_t> sum = h;
  AddF32IntoBf16(add.data(), sum.data(), static_cast<int64_t>(sum.size()));
  int64_t bad_sum = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const uint16_t want = FloatToBf16(Bf16ToFloat(h[i]) + add[i]);
    const bool both_nan = std::isnan(Bf16ToFloat(want)) && std::isnan(Bf16ToFloat(sum[i]));
    bad_sum += sum[i] != want && !both_nan;
  }
  CHECK(bad_sum == 0);
}

}  // namespace
}  // namespace ds
