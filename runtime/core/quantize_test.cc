// Block quantization (quantize.h) against an fp64 reference: every value within half a step of
// its block's scale, the scale max|x| / qmax, the integers the reference rounds to (ties aside),
// int8 and int4, fp32 and bf16 sources, block sizes from 2 to 4096 with short last blocks, zero
// blocks and outliers; the 16-lane and 8-lane paths give the same bits (the *_avx2 twin runs this
// file again under DS_CPU_ISA=avx2); bad specs are refused.
#include "runtime/core/quantize.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/core/cpu_isa.h"
#include "runtime/core/dtype.h"

namespace ds {
namespace {

std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(gen) * 0.02f;
  for (int64_t i = 0; i < n; i += 997) x[i] *= 300.f;  // outliers set their blocks' scales
  for (int64_t i = n / 3; i < std::min(n, n / 3 + 64); ++i) x[i] = 0.f;  // a zero run
  return x;
}

int8_t At(const std::vector<int8_t>& q, int bits, int64_t i) {
  if (bits == 8) return q[i];
  const int nib = (static_cast<uint8_t>(q[i / 2]) >> (i % 2 * 4)) & 0xF;
  return static_cast<int8_t>(nib >= 8 ? nib - 16 : nib);
}

// Quantizes x, checks it against fp64 and returns the dequantized values.
std::vector<float> RoundTrip(const std::vector<float>& x, const QuantSpec& s) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<int8_t> q(QuantizedValueBytes(n, s));
  std::vector<float> scales(QuantBlocks(n, s)), y(n);
  Quantize(x.data(), n, s, q.data(), scales.data());
  Dequantize(q.data(), scales.data(), n, s, y.data());
  const double qmax = s.bits == 8 ? 127 : 7;
  int64_t ties = 0;
  for (int64_t b = 0; b < QuantBlocks(n, s); ++b) {
    double amax = 0;
    for (int64_t i = b * s.block; i < std::min(n, (b + 1) * s.block); ++i)
      amax = std::max(amax, std::fabs(double(x[i])));
    REQUIRE(scales[b] == Approx(amax / qmax).epsilon(1e-6));
    for (int64_t i = b * s.block; i < std::min(n, (b + 1) * s.block); ++i) {
      const double exact = amax > 0 ? double(x[i]) / (amax / qmax) : 0;
      const int qi = At(q, s.bits, i);
      if (qi != std::nearbyint(exact)) {  // only at a tie the fp32 product may break the other way
        REQUIRE(std::fabs(std::fabs(exact - std::trunc(exact)) - 0.5) < 1e-4);
        ++ties;
      }
      REQUIRE(std::abs(qi) <= qmax);
      REQUIRE(std::fabs(double(y[i]) - double(x[i])) <= 0.5 * scales[b] * (1 + 1e-5) + 1e-30);
    }
  }
  CHECK(ties <= n / 1000);
  return y;
}

TEST_CASE("Quantize: int8 and int4 round trips within half a step of fp64", "[quantize]") {
  for (int bits : {8, 4})
    for (int64_t block : {2, 32, 64, 2048, 4096})
      for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{4096}, int64_t{10007}}) {
        if (bits == 4 && n == 1 && block == 2) continue;
        INFO("bits " << bits << ", block " << block << ", n " << n);
        const std::vector<float> x = Values(n, static_cast<uint32_t>(n + block));
        RoundTrip(x, QuantSpec{bits, block});
      }
}

TEST_CASE("Quantize: bf16 sources and outputs", "[quantize]") {
  const int64_t n = 5000;
  const std::vector<float> wide = Values(n, 7);
  std::vector<uint16_t> x(n);
  RoundToBf16Run(wide.data(), x.data(), n);
  std::vector<float> as_f32(n);
  WidenBf16Run(x.data(), as_f32.data(), n);
  for (int bits : {8, 4}) {
    const QuantSpec s{bits, 256};
    std::vector<int8_t> q(QuantizedValueBytes(n, s)), q32(QuantizedValueBytes(n, s));
    std::vector<float> scales(QuantBlocks(n, s)), scales32(QuantBlocks(n, s));
    QuantizeBf16(x.data(), n, s, q.data(), scales.data());
    Quantize(as_f32.data(), n, s, q32.data(), scales32.data());
    CHECK(q == q32);  // a bf16 source quantizes as its fp32 values do
    CHECK(scales == scales32);
    std::vector<uint16_t> y(n);
    std::vector<float> y32 = RoundTrip(as_f32, s);
    DequantizeBf16(q.data(), scales.data(), n, s, y.data());
    for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == FloatToBf16(y32[i]));
  }
}

TEST_CASE("Quantize: zero blocks, an inf, bad specs", "[quantize]") {
  std::vector<float> x(64, 0.f);
  const QuantSpec s{8, 32};
  std::vector<int8_t> q(64);
  std::vector<float> scales(2), y(64, 1.f);
  x[40] = INFINITY;
  Quantize(x.data(), 64, s, q.data(), scales.data());
  Dequantize(q.data(), scales.data(), 64, s, y.data());
  CHECK(scales[0] == 0.f);
  for (int i = 0; i < 32; ++i) CHECK(y[i] == 0.f);
  CHECK(std::isnan(y[40]));  // the block with the inf says so after the collective
  CHECK(CheckQuantSpec({8, 2048}).ok());
  CHECK(CheckQuantSpec({4, 2048}).ok());
  CHECK_FALSE(CheckQuantSpec({2, 64}).ok());
  CHECK_FALSE(CheckQuantSpec({4, 63}).ok());
  CHECK_FALSE(CheckQuantSpec({8, 0}).ok());
}

// Every path (16 lanes here, 8 under DS_CPU_ISA=avx2 in quantize_avx2_test) gives the bits of the
// formula in quantize.h computed one value at a time, so ranks on different CPUs agree.
TEST_CASE("Quantize: the lanes the CPU takes give the scalar formula's bits", "[quantize]") {
  INFO("host ISA " << CpuIsaName(HostCpuIsa()));
  for (int bits : {8, 4}) {
    const int64_t n = 1003;
    const QuantSpec s{bits, 100};
    const std::vector<float> x = Values(n, 3);
    std::vector<int8_t> q(QuantizedValueBytes(n, s));
    std::vector<float> scales(QuantBlocks(n, s)), y(n);
    Quantize(x.data(), n, s, q.data(), scales.data());
    Dequantize(q.data(), scales.data(), n, s, y.data());
    const float qmax = bits == 8 ? 127.f : 7.f;
    for (int64_t b = 0; b < QuantBlocks(n, s); ++b) {
      float amax = 0.f;
      for (int64_t i = b * s.block; i < std::min(n, (b + 1) * s.block); ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float inv = qmax / amax, scale = amax / qmax;
      REQUIRE(scales[b] == scale);
      for (int64_t i = b * s.block; i < std::min(n, (b + 1) * s.block); ++i) {
        const long expect = std::lrintf(x[i] * inv);
        REQUIRE(At(q, bits, i) == expect);
        REQUIRE(y[i] == static_cast<float>(expect) * scale);
      }
    }
  }
}

}  // namespace
}  // namespace ds
