// cpu_util: the vectorized exp against std::exp, NaN and range handling; ParallelChunks
// covering every index once.
#include "kernels/cpu/cpu_util.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ds::kernels::cpu {
namespace {

TEST_CASE("cpu_util: ExpArray is within a few ulp of std::exp", "[kernels][cpu_util]") {
  std::vector<float> x;
  for (float v = -87.f; v <= 88.f; v += 0.0137f) x.push_back(v);
  x.push_back(0.f);
  std::vector<float> y(x.size());
  ExpArray(x.data(), y.data(), static_cast<int64_t>(x.size()));  // includes a ragged tail
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / want);
  }
  CHECK(worst < 4 * std::numeric_limits<float>::epsilon());
  CHECK(y.back() == 1.f);
}

TEST_CASE("cpu_util: ExpArray edge cases", "[kernels][cpu_util]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {nan, -inf, -1000.f, 89.f, 1.f, nan, -100.f, 0.f, nan};
  std::vector<float> y(x.size());
  ExpArray(x.data(), y.data(), static_cast<int64_t>(x.size()));
  CHECK(std::isnan(y[0]));
  CHECK(y[1] < 1e-37f);
  CHECK(y[2] < 1e-37f);
  CHECK(y[3] > 1e38f);
  CHECK(y[4] == Approx(std::exp(1.0)).epsilon(1e-6));
  CHECK(std::isnan(y[5]));
  CHECK(std::isnan(y[8]));  // the tail path
}

// Whole vectors (16 lanes where the CPU has AVX-512, else 8) and the one-element tail path
// give the same bits: an element's value never depends on where it sits.
TEST_CASE("cpu_util: ExpArray rounds alike in whole vectors and tails", "[kernels][cpu_util]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x;
  for (float v = -90.f; v <= 90.f; v += 0.173f) x.push_back(v);
  x.push_back(nan);
  x.push_back(-std::numeric_limits<float>::infinity());
  while (x.size() % 16) x.push_back(0.5f);
  std::vector<float> whole(x.size()), one(x.size());
  ExpArray(x.data(), whole.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ExpArray(&x[i], &one[i], 1);
  int differ = 0;
  for (size_t i = 0; i < x.size(); ++i)
    differ += std::memcmp(&whole[i], &one[i], sizeof(float)) != 0;
  CHECK(differ == 0);
  std::vector<float> shifted(x.size());
  const float sum = ExpShiftSum(x.data(), shifted.data(), static_cast<int64_t>(x.size()) - 64, 0.f);
  CHECK(std::memcmp(shifted.data(), whole.data(), (x.size() - 64) * sizeof(float)) == 0);
  CHECK(std::isfinite(sum));
}

TEST_CASE("cpu_util: ExpShiftSum and MaxArray", "[kernels][cpu_util]") {
  std::vector<float> x(37), y(37);
  double want = 0;
  for (int i = 0; i < 37; ++i) {
    x[i] = 0.25f * i - 3.f;
    want += std::exp(x[i] - 2.0);
  }
  CHECK(ExpShiftSum(x.data(), y.data(), 37, 2.f) == Approx(want).epsilon(1e-6));
  CHECK(y[36] == Approx(std::exp(x[36] - 2.0)).epsilon(1e-6));
  CHECK(MaxArray(x.data(), 37) == x[36]);
  CHECK(MaxArray(x.data(), 3) == x[2]);
}

TEST_CASE("cpu_util: ParallelSgemm matches Sgemm on row and column splits", "[kernels][cpu_util]") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  struct Dims {
    int64_t m, n, k;
  };
  for (Dims d : {Dims{517, 100, 128}, Dims{48, 1001, 128}}) {  // row split, column split
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      INFO("m " << d.m << " n " << d.n << " trans_a " << ta << " trans_b " << tb);
      std::vector<float> a(d.m * d.k), b(d.k * d.n), c1(d.m * d.n), c2;
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (float& v : c1) v = dist(rng);
      c2 = c1;
      const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
      Sgemm(ta, tb, d.m, d.n, d.k, 0.5f, a.data(), lda, b.data(), ldb, 1.f, c1.data(), d.n);
      ParallelSgemm(ta, tb, d.m, d.n, d.k, 0.5f, a.data(), lda, b.data(), ldb, 1.f, c2.data(), d.n);
      for (size_t i = 0; i < c1.size(); ++i) REQUIRE(c2[i] == Approx(c1[i]).margin(1e-5));
    }
  }
  omp_set_num_threads(saved);
}

// A decode step's linears (1 to 8 rows against a transposed weight) go to FewRowsGemm: every
// row count, odd and even n (the last row of B alone), k with a ragged tail of 16-lane steps,
// padded leading dimensions (no prefetch), alpha and beta, against a double-precision sum.
TEST_CASE("cpu_util: Sgemm of 1 to 8 rows against B^T matches the exact sums",
          "[kernels][cpu_util]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t m = 1; m <= 8; ++m)
    for (int64_t n : {1, 2, 7, 34})
      for (int64_t k : {64, 100, 773})
        for (int64_t pad : {0, 5}) {
          INFO("m " << m << " n " << n << " k " << k << " pad " << pad);
          const int64_t lda = k + pad, ldb = k + pad, ldc = n + pad;
          std::vector<float> a(m * lda), b(n * ldb), c(m * ldc);
          for (float& v : a) v = dist(rng);
          for (float& v : b) v = dist(rng);
          for (float& v : c) v = dist(rng);
          const std::vector<float> c0 = c;
          const float alpha = 0.75f, beta = pad ? 0.5f : 0.f;
          Sgemm(false, true, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0;
              for (int64_t t = 0; t < k; ++t) sum += double(a[i * lda + t]) * b[j * ldb + t];
              const double want = alpha * sum + beta * c0[i * ldc + j];
              REQUIRE(c[i * ldc + j] == Approx(want).margin(1e-4));
            }
          for (int64_t i = 0; i < m; ++i)  // the padding is left alone
            for (int64_t j = n; j < ldc; ++j) REQUIRE(c[i * ldc + j] == c0[i * ldc + j]);
        }
}

TEST_CASE("cpu_util: ParallelChunks covers each index once", "[kernels][cpu_util]") {
  for (int chunks : {1, 2, 3, 7}) {
    std::vector<int> hits(1000, 0);
    ParallelChunks(1000, chunks, [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++hits[i];
    });
    for (int h : hits) REQUIRE(h == 1);
  }
  int calls = 0;
  ParallelFor(10, 1000, [&](int64_t begin, int64_t end) {
    ++calls;
    CHECK(begin == 0);
    CHECK(end == 10);
  });
  CHECK(calls == 1);
}

}  // namespace
}  // namespace ds::kernels::cpu
