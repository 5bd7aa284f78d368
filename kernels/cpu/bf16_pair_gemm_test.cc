// bf16_pair_gemm.h against fp64: products of bf16 values accumulate in fp32, so C is the fp64 sum
// within fp32 rounding of each partial sum (1e-5 of the sum of |terms|); the packings against
// their definitions, bit for bit, padding 0. Shapes whose rows, columns and pairs are not a
// multiple of the 4 x 64 tile, transposed A read through strides, accumulate and alpha.
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/bf16_pair_gemm.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

std::vector<uint16_t> RandomBf16(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = FloatToBf16(dist(rng));
  return v;
}

TEST_CASE("pair products equal fp64 sums of bf16 products", "[kernels][bf16]") {
  if (!Bf16PairGemmHere()) {
    WARN("no AVX512_BF16 here: the pair products are not used");
    return;
  }
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{1, 16, 2}, Shape{7, 48, 30}, Shape{32, 256, 64}, Shape{33, 80, 64},
                         Shape{130, 144, 18}, Shape{5, 64, 255}}) {
    for (bool transposed : {false, true}) {
      for (bool accumulate : {false, true}) {
        INFO("m " << s.m << " n " << s.n << " k " << s.k << (transposed ? " A^T" : "")
                  << (accumulate ? " +C" : ""));
        std::mt19937 rng(static_cast<uint32_t>(s.m * 131 + s.n + s.k));
        const int64_t kp = (s.k + 1) / 2, kk = 2 * kp;  // an odd k: a 0 pair half
        std::vector<uint16_t> a = RandomBf16(s.m * kk, rng), b = RandomBf16(kk * s.n, rng);
        for (int64_t r = 0; r < s.m; ++r)
          for (int64_t q = s.k; q < kk; ++q) a[r * kk + q] = 0;
        std::vector<uint32_t> bp(static_cast<size_t>(kp * s.n));
        PackRowPairs(b.data(), s.n, s.k, s.n, kk, bp.data());
        // A as pairs: rows of a directly, or A^T's storage [kk, m] by row pairs read transposed.
        const int64_t mw = (s.m + 15) / 16 * 16;  // A^T's rows, as wide as packing takes them
        std::vector<uint16_t> at(static_cast<size_t>(kk * mw));
        for (int64_t r = 0; r < s.m; ++r)
          for (int64_t q = 0; q < kk; ++q) at[q * mw + r] = a[r * kk + q];
        std::vector<uint32_t> ap(static_cast<size_t>(kp * mw));
        PackRowPairs(at.data(), mw, s.k, mw, kk, ap.data());
        const PairRows pa = transposed ? PairRows{ap.data(), 1, mw}
                                       : PairRows{reinterpret_cast<uint32_t*>(a.data()), kp, 1};
        const int64_t ldc = s.n + 16;
        std::vector<float> c(static_cast<size_t>(s.m * ldc), 0.25f);
        const float alpha = 0.75f;
        Bf16PairGemm(s.m, s.n, kp, pa, bp.data(), s.n, c.data(), ldc, alpha, accumulate);
        int bad = 0;
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0, mag = 0;
            for (int64_t q = 0; q < s.k; ++q) {
              const double t = double(Bf16ToFloat(a[r * kk + q])) * Bf16ToFloat(b[q * s.n + j]);
              sum += t;
              mag += std::fabs(t);
            }
            const double want = alpha * sum + (accumulate ? 0.25 : 0.0);
            if (std::fabs(c[r * ldc + j] - want) > 1e-5 * (mag + 1)) ++bad;
          }
          for (int64_t j = s.n; j < ldc; ++j) bad += c[r * ldc + j] != 0.25f;  // past n: untouched
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("the packings lay bf16 rows out as VDPBF16PS reads them", "[kernels][bf16]") {
  if (!Bf16PairGemmHere()) {
    WARN("no AVX512_BF16 here: the packings are not used");
    return;
  }
  struct Shape {
    int64_t rows, cols, ld;
  };
  for (const Shape& s : {Shape{256, 64, 2304}, Shape{47, 48, 48}, Shape{33, 128, 160},
                         Shape{5, 16, 20}, Shape{16, 32, 32}}) {
    INFO("rows " << s.rows << " cols " << s.cols << " ld " << s.ld);
    std::mt19937 rng(static_cast<uint32_t>(s.rows + s.cols));
    const std::vector<uint16_t> x = RandomBf16(s.rows * s.ld, rng);
    const int64_t tp = (s.rows + 31) / 32 * 32;
    auto at = [&](int64_t r, int64_t c) -> uint32_t { return r < s.rows ? x[r * s.ld + c] : 0; };
    std::vector<uint32_t> rp(static_cast<size_t>(tp / 2 * s.cols), 7u);
    PackRowPairs(x.data(), s.ld, s.rows, s.cols, tp, rp.data());
    std::vector<uint32_t> pc(static_cast<size_t>(s.cols / 2 * tp), 7u);
    PackPairColumns(x.data(), s.ld, s.rows, s.cols, tp, pc.data());
    int bad = 0;
    for (int64_t q = 0; q < tp / 2; ++q)
      for (int64_t c = 0; c < s.cols; ++c)
        bad += rp[q * s.cols + c] != (at(2 * q, c) | at(2 * q + 1, c) << 16);
    for (int64_t p = 0; p < s.cols / 2; ++p)
      for (int64_t r = 0; r < tp; ++r)
        bad += pc[p * tp + r] != (at(r, 2 * p) | at(r, 2 * p + 1) << 16);
    CHECK(bad == 0);
  }
}

}  // namespace
}  // namespace ds::kernels::cpu
