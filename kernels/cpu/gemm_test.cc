// gemm.h: every product against an fp64 reference, both libraries, both transposes, padded
// leading dimensions, alpha and beta; bf16 inputs natively and widened; primitives made at
// PrepareGemm and none after; linear's bf16 products against the reference of its rounded
// inputs.
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/registry.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/core/dtype.h"

namespace ds::kernels::cpu {
namespace {

struct Case {
  GemmShape s;
  float alpha, beta;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double At(const std::vector<float>& x, bool trans, int64_t r, int64_t c, int64_t ld) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

// Worst |got - want| / (|alpha| sum_k |a b| + |beta c|): the error relative to the magnitude the
// sum went through, which fp32 accumulation bounds by about k * 2^-24.
double WorstError(const Case& t, const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& c0, const std::vector<float>& c) {
  const GemmShape& s = t.s;
  double worst = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        const double p = At(a, s.trans_a, i, k, s.lda) * At(b, s.trans_b, k, j, s.ldb);
        sum += p;
        mag += std::fabs(p);
      }
      const double want = t.alpha * sum + t.beta * c0[i * s.ldc + j];
      const double scale = std::fabs(t.alpha) * mag + std::fabs(t.beta * c0[i * s.ldc + j]);
      worst = std::max(worst, std::fabs(c[i * s.ldc + j] - want) / std::max(scale, 1e-30));
    }
  return worst;
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 37, n = 29, k = 71, pad = ta || tb ? 3 : 0;
      GemmShape s{ta, tb, m, n, k, (ta ? m : k) + pad, (tb ? k : n) + pad, n + pad};
      out.push_back({s, 1.f, 0.f});
      out.push_back({s, 0.125f, 1.f});
      out.push_back({s, 1.f, 0.5f});
    }
  out.push_back({{false, false, 1, 40, 33, 33, 40, 40}, 1.f, 1.f});  // one row: the sgemv path
  // Where oneDNN runs bf16 on avx512_core_bf16, products it takes in two halves: a transposed A
  // (rows 0-79 and 80-149), a long reduction with A and B plain (columns 0-47 and 48-69) and a
  // wide x W^T (columns 0-1551 and 1552-3099).
  for (float beta : {0.f, 1.f}) {
    out.push_back({{true, false, 150, 29, 71, 153, 32, 32}, 1.f, beta});
    out.push_back({{false, false, 37, 70, 600, 603, 73, 73}, 1.f, beta});
    out.push_back({{false, true, 9, 3100, 40, 43, 43, 3103}, 1.f, beta});
  }
  return out;
}

struct Operands {
  std::vector<float> a, b, c0;
};

Operands Make(const Case& t, uint32_t seed, bool bf16_values) {
  const GemmShape& s = t.s;
  Operands o{Random((s.trans_a ? s.k : s.m) * s.lda, seed),
             Random((s.trans_b ? s.n : s.k) * s.ldb, seed + 1), Random(s.m * s.ldc, seed + 2)};
  if (bf16_values)
    for (auto* v : {&o.a, &o.b})
      for (float& x : *v) x = Bf16ToFloat(FloatToBf16(x));
  return o;
}

TEST_CASE("Gemm: fp32 products against fp64, oneDNN, OpenBLAS and auto", "[kernels][gemm]") {
  for (GemmLibrary lib : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas, GemmLibrary::kAuto}) {
    SetGemmLibrary(lib);
    uint32_t seed = 1;
    for (const Case& t : Cases()) {
      const Operands o = Make(t, seed += 3, false);
      std::vector<float> c = o.c0;
      Gemm(t.s, t.alpha, o.a.data(), o.b.data(), t.beta, c.data());
      INFO(GemmLibraryName(lib) << " ta=" << t.s.trans_a << " tb=" << t.s.trans_b
                                << " alpha=" << t.alpha << " beta=" << t.beta);
      CHECK(WorstError(t, o.a, o.b, o.c0, c) < 8 * t.s.k * 6e-8);
    }
  }
  SetGemmLibrary(GemmLibrary::kOneDnn);
}

// gemm_avx2_test runs this file with DS_CPU_ISA=avx2: oneDNN must be held to AVX2 too, and no
// product may take the bf16 dot-product path.
TEST_CASE("DS_CPU_ISA reaches oneDNN: native bf16 only where the cap allows it",
          "[kernels][gemm]") {
  INFO("host ISA " << CpuIsaName(HostCpuIsa()) << ", oneDNN ISA " << OneDnnIsa());
  if (HostCpuIsa() != CpuIsa::kAvx512Bf16) CHECK_FALSE(HasNativeBf16Gemm());
  if (HostCpuIsa() == CpuIsa::kAvx2) CHECK(OneDnnIsa() == "avx2");
  if (HostCpuIsa() == CpuIsa::kAvx512) CHECK(OneDnnIsa().rfind("avx512", 0) == 0);
}

TEST_CASE("GemmBf16: native and widened bf16 products against fp64", "[kernels][gemm]") {
  INFO("oneDNN ISA " << OneDnnIsa() << ", native bf16 " << HasNativeBf16Gemm());
  for (Bf16Gemm mode : {Bf16Gemm::kNative, Bf16Gemm::kWiden}) {
    uint32_t seed = 100;
    for (const Case& t : Cases()) {
      const Operands o = Make(t, seed += 3, true);
      std::vector<uint16_t> a16(o.a.size()), b16(o.b.size());
      ConvertF32ToBf16(o.a.data(), a16.data(), static_cast<int64_t>(o.a.size()));
      ConvertF32ToBf16(o.b.data(), b16.data(), static_cast<int64_t>(o.b.size()));
      std::vector<float> c = o.c0;
      GemmBf16(t.s, t.alpha, a16.data(), b16.data(), t.beta, c.data(), mode);
      INFO("mode " << (mode == Bf16Gemm::kNative ? "native" : "widen") << " ta=" << t.s.trans_a
                   << " tb=" << t.s.trans_b << " alpha=" << t.alpha << " beta=" << t.beta);
      // The inputs are exact bf16 values: only fp32 accumulation differs from the reference.
      CHECK(WorstError(t, o.a, o.b, o.c0, c) < 8 * t.s.k * 6e-8);
    }
  }
}

// A bias row: the product with it equals the product without it plus bias[j] in column j, for
// both libraries, the one-row path and bf16 natively and widened.
TEST_CASE("Gemm and GemmBf16 add a bias row", "[kernels][gemm]") {
  uint32_t seed = 500;
  for (GemmLibrary lib : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
    SetGemmLibrary(lib);
    for (const Case& t : Cases()) {
      const Operands o = Make(t, seed += 3, true);
      const std::vector<float> bias = Random(t.s.n, seed + 7);
      std::vector<uint16_t> a16(o.a.size()), b16(o.b.size());
      ConvertF32ToBf16(o.a.data(), a16.data(), static_cast<int64_t>(o.a.size()));
      ConvertF32ToBf16(o.b.data(), b16.data(), static_cast<int64_t>(o.b.size()));
      for (int path = 0; path < 3; ++path) {  // fp32, bf16 native, bf16 widened
        std::vector<float> plain = o.c0, with = o.c0;
        const Bf16Gemm mode = path == 1 ? Bf16Gemm::kNative : Bf16Gemm::kWiden;
        if (path == 0) {
          Gemm(t.s, t.alpha, o.a.data(), o.b.data(), t.beta, plain.data());
          Gemm(t.s, t.alpha, o.a.data(), o.b.data(), t.beta, with.data(), bias.data());
        } else {
          GemmBf16(t.s, t.alpha, a16.data(), b16.data(), t.beta, plain.data(), mode);
          GemmBf16(t.s, t.alpha, a16.data(), b16.data(), t.beta, with.data(), mode, bias.data());
        }
        double worst = 0;
        for (int64_t i = 0; i < t.s.m; ++i)
          for (int64_t j = 0; j < t.s.n; ++j) {
            const double want = static_cast<double>(plain[i * t.s.ldc + j]) + bias[j];
            worst = std::max(worst, std::fabs(with[i * t.s.ldc + j] - want));
          }
        INFO(GemmLibraryName(lib) << " path " << path << " ta=" << t.s.trans_a
                                  << " tb=" << t.s.trans_b << " m=" << t.s.m);
        CHECK(worst < 1e-5);
      }
    }
  }
  SetGemmLibrary(GemmLibrary::kOneDnn);
}

// bf16 output: the fp32 product (and bias) rounded once, natively (oneDNN writes bf16) and
// widened; against GemmBf16's fp32 output rounded, within one bf16 step (the two primitives may
// sum in other orders, which moves a value across a rounding boundary now and then).
TEST_CASE("GemmBf16Out: the fp32 product rounded once to bf16", "[kernels][gemm]") {
  uint32_t seed = 900;
  for (Bf16Gemm mode : {Bf16Gemm::kNative, Bf16Gemm::kWiden})
    for (const Case& t : Cases()) {
      if (t.alpha != 1.f || t.beta != 0.f) continue;  // GemmBf16Out writes C = op(A) op(B)
      const Operands o = Make(t, seed += 3, true);
      const std::vector<float> bias = Random(t.s.n, seed + 7);
      std::vector<uint16_t> a16(o.a.size()), b16(o.b.size());
      ConvertF32ToBf16(o.a.data(), a16.data(), static_cast<int64_t>(o.a.size()));
      ConvertF32ToBf16(o.b.data(), b16.data(), static_cast<int64_t>(o.b.size()));
      std::vector<float> wide(o.c0.size());
      std::vector<uint16_t> c16(o.c0.size(), 0x7fc0);  // NaN where nothing may be written
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        GemmBf16(t.s, 1.f, a16.data(), b16.data(), 0.f, wide.data(), mode, b);
        GemmBf16Out(t.s, a16.data(), b16.data(), c16.data(), mode, b);
        int64_t exact = 0;
        double worst = 0;
        for (int64_t i = 0; i < t.s.m; ++i)
          for (int64_t j = 0; j < t.s.n; ++j) {
            const float want = wide[i * t.s.ldc + j];
            const float got = Bf16ToFloat(c16[i * t.s.ldc + j]);
            exact += FloatToBf16(want) == c16[i * t.s.ldc + j];
            worst = std::max(worst, std::fabs(got - want) / (std::fabs(want) + 1e-3));
          }
        INFO("mode " << (mode == Bf16Gemm::kNative ? "native" : "widen") << " ta=" << t.s.trans_a
                     << " tb=" << t.s.trans_b << " bias " << (b != nullptr));
        CHECK(worst <= 1.0 / 128);                         // within one bf16 step of the fp32 value
        CHECK(exact >= t.s.m * t.s.n * 95 / 100);          // and mostly its rounding exactly
        if (t.s.ldc > t.s.n) CHECK(c16[t.s.n] == 0x7fc0);  // the padding is not written
      }
    }
}

// A bf16 model's weight gradient accumulated where it is stored: C's widened value plus the fp32
// product, rounded once (what AddF32IntoBf16 of the fp32 product gives), padding untouched.
TEST_CASE("GemmBf16Add: the fp32 product added into bf16 C, rounded once", "[kernels][gemm]") {
  uint32_t seed = 1900;
  for (Bf16Gemm mode : {Bf16Gemm::kNative, Bf16Gemm::kWiden})
    for (const Case& t : Cases()) {
      if (t.alpha != 1.f || t.beta != 0.f) continue;
      const Operands o = Make(t, seed += 3, true);
      std::vector<uint16_t> a16(o.a.size()), b16(o.b.size()), c16(o.c0.size(), 0x7fc0);
      ConvertF32ToBf16(o.a.data(), a16.data(), static_cast<int64_t>(o.a.size()));
      ConvertF32ToBf16(o.b.data(), b16.data(), static_cast<int64_t>(o.b.size()));
      const std::vector<float> c0 = Random(t.s.m * t.s.ldc, seed + 11);
      for (int64_t i = 0; i < t.s.m; ++i)
        ConvertF32ToBf16(c0.data() + i * t.s.ldc, c16.data() + i * t.s.ldc, t.s.n);
      std::vector<uint16_t> want16 = c16;
      std::vector<float> wide(o.c0.size());
      GemmBf16(t.s, 1.f, a16.data(), b16.data(), 0.f, wide.data(), mode);
      for (int64_t i = 0; i < t.s.m; ++i)
        AddF32IntoBf16(wide.data() + i * t.s.ldc, want16.data() + i * t.s.ldc, t.s.n);
      GemmBf16Add(t.s, a16.data(), b16.data(), c16.data(), mode);
      int64_t exact = 0;
      double worst = 0;
      for (int64_t i = 0; i < t.s.m; ++i)
        for (int64_t j = 0; j < t.s.n; ++j) {
          const uint16_t got = c16[i * t.s.ldc + j], want = want16[i * t.s.ldc + j];
          exact += got == want;
          const double w = Bf16ToFloat(want);
          worst = std::max(worst, std::fabs(Bf16ToFloat(got) - w) / (std::fabs(w) + 1e-3));
        }
      INFO("mode " << (mode == Bf16Gemm::kNative ? "native" : "widen") << " ta=" << t.s.trans_a
                   << " tb=" << t.s.trans_b << " m " << t.s.m << " n " << t.s.n);
      CHECK(worst <= 1.0 / 128);  // within one bf16 step
      CHECK(exact >= t.s.m * t.s.n * 95 / 100);
      if (mode == Bf16Gemm::kWiden) CHECK(exact == t.s.m * t.s.n);  // the same fp32 product
      if (t.s.ldc > t.s.n) CHECK(c16[t.s.n] == 0x7fc0);             // the padding
    }
}

// auto: a plain B of 768 columns or more goes to OpenBLAS (no oneDNN primitive), a transposed
// one, or a narrower one, to oneDNN; the same product under onednn makes a primitive.
TEST_CASE("Gemm auto: the shapes oneDNN's brgemm is slow on go elsewhere", "[kernels][gemm]") {
  const GemmShape plain_wide{false, false, 16, 768, 24, 24, 768, 768};
  const GemmShape transposed_wide{false, true, 16, 768, 24, 24, 24, 768};
  const GemmShape plain_narrow{false, false, 16, 767, 24, 24, 767, 767};
  auto makes = [](GemmLibrary lib, const GemmShape& s) {
    SetGemmLibrary(lib);
    const int64_t before = GemmPrimitivesMade();
    REQUIRE(PrepareGemm(s, 1.f, 0.5f, false).ok());  // beta 0.5: a key no other case uses
    return GemmPrimitivesMade() - before;
  };
  // On avx512_core_bf16 a plain wide B goes to oneDNN's gemm:jit as two halves of its columns
  // (384 each: one primitive).
  const bool halves = OneDnnIsa() == "avx512_core_bf16";
  CHECK(makes(GemmLibrary::kAuto, plain_wide) == (halves ? 1 : 0));
  CHECK(makes(GemmLibrary::kAuto, transposed_wide) == 1);
  CHECK(makes(GemmLibrary::kAuto, plain_narrow) == 1);
  CHECK(makes(GemmLibrary::kOneDnn, plain_wide) == (halves ? 0 : 1));  // made above
  GemmLibrary parsed = GemmLibrary::kOneDnn;
  CHECK(ParseGemmLibrary("auto", &parsed));
  CHECK(parsed == GemmLibrary::kAuto);
  CHECK(std::string(GemmLibraryName(parsed)) == "auto");
  SetGemmLibrary(GemmLibrary::kOneDnn);
}

TEST_CASE("PrepareGemm makes the primitive once; the products make none", "[kernels][gemm]") {
  SetGemmLibrary(GemmLibrary::kOneDnn);
  const GemmShape s{false, true, 64, 48, 32, 32, 32, 48};
  REQUIRE(PrepareGemm(s, 1.f, 0.f, false).ok());
  REQUIRE(PrepareGemm(s, 1.f, 1.f, false).ok());
  const int64_t made = GemmPrimitivesMade();
  REQUIRE(PrepareGemm(s, 1.f, 0.f, false).ok());  // known: nothing new
  const std::vector<float> a = Random(65 * 32, 7), b = Random(48 * 32, 8);
  std::vector<float> c(65 * 48);
  for (int i = 0; i < 3; ++i) Gemm(s, 1.f, a.data(), b.data(), i == 0 ? 0.f : 1.f, c.data());
  CHECK(GemmPrimitivesMade() == made);
  Gemm({false, true, 65, 48, 32, 32, 32, 48}, 1.f, a.data(), b.data(), 0.f, c.data());
  CHECK(GemmPrimitivesMade() == made + 1);  // an unprepared shape is made on first use
}

// Ranks in threads (the trainer tests) multiply at the same time: each thread's products must
// equal what it gets alone. (oneDNN's process-wide scratchpad mixed up the ranks of
// runtime/worker:trainer_dp_test, which caught it; these shapes alone do not touch it.)
TEST_CASE("Gemm: threads multiplying at once get their own results", "[kernels][gemm]") {
  SetGemmLibrary(GemmLibrary::kOneDnn);
  struct Job {
    GemmShape s;
    std::vector<float> a, b, alone, c;
  };
  std::vector<Job> jobs;
  for (int j = 0; j < 6; ++j) {  // forward, input-gradient and weight-gradient shapes
    const int64_t m = 64 + 16 * j, n = 32 + 16 * j, k = 32 + 32 * j;
    const GemmShape s = j % 3 == 0   ? GemmShape{false, true, m, n, k, k, k, n}
                        : j % 3 == 1 ? GemmShape{false, false, m, n, k, k, n, n}
                                     : GemmShape{true, false, m, n, k, m, n, n};
    Job job{s, Random(m * k, 30 + j), Random(n * k, 40 + j), {}, {}};
    job.alone.assign(m * n, 0.5f);  // beta = 1: the sum post-op, as linear's products have
    Gemm(job.s, 1.f, job.a.data(), job.b.data(), 1.f, job.alone.data());
    jobs.push_back(std::move(job));
  }
  std::vector<int> mismatches(jobs.size(), 0);
  std::vector<std::thread> threads;
  for (size_t j = 0; j < jobs.size(); ++j)
    threads.emplace_back([&, j] {
      omp_set_num_threads(1);  // as a rank with device.threads 1
      Job& job = jobs[j];
      for (int rep = 0; rep < 50; ++rep) {
        job.c.assign(job.alone.size(), 0.5f);
        Gemm(job.s, 1.f, job.a.data(), job.b.data(), 1.f, job.c.data());
        mismatches[j] += job.c != job.alone;
      }
    });
  for (std::thread& t : threads) t.join();
  for (size_t j = 0; j < jobs.size(); ++j) CHECK(mismatches[j] == 0);
}

// linear with OpArgs::matmul = kBF16: y, dx and dW equal the fp64 products of the bf16-rounded
// x, W and dy (fp32 accumulation aside), and differ from the fp32 kernel's by bf16 rounding.
TEST_CASE("linear: bf16 products round x, W and dy to bf16", "[kernels][gemm]") {
  const int64_t n = 24, in = 40, out = 16;
  std::vector<float> x = Random(n * in, 11), w = Random(out * in, 12), dy = Random(n * out, 13);
  for (float& v : w) v = Bf16ToFloat(FloatToBf16(v));  // a bf16 model's widened weights
  std::vector<float> y(n * out), dx(n * in, 0.f), dw(out * in, 0.f);
  OpArgs args;
  Attrs attrs;
  args.attrs = &attrs;
  args.in = {Tensor(x.data(), {n, in}, DType::kF32), Tensor(w.data(), {out, in}, DType::kF32)};
  args.out = {Tensor(y.data(), {n, out}, DType::kF32)};
  args.grad_out = {Tensor(dy.data(), {n, out}, DType::kF32)};
  args.grad_in = {Tensor(dx.data(), {n, in}, DType::kF32),
                  Tensor(dw.data(), {out, in}, DType::kF32)};
  args.matmul = DType::kBF16;
  const Kernel* k = FindKernel("linear", Device::kCpu, DType::kF32);
  REQUIRE(k);
  REQUIRE(k->prepare(args).ok());
  REQUIRE(k->forward(args).ok());
  REQUIRE(k->backward(args).ok());
  auto r = [](float v) { return static_cast<double>(Bf16ToFloat(FloatToBf16(v))); };
  double worst_y = 0, worst_dx = 0, worst_dw = 0, unrounded = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double want = 0, exact = 0;
      for (int64_t c = 0; c < in; ++c) {
        want += r(x[i * in + c]) * w[j * in + c];
        exact += static_cast<double>(x[i * in + c]) * w[j * in + c];
      }
      worst_y = std::max(worst_y, std::fabs(y[i * out + j] - want));
      unrounded = std::max(unrounded, std::fabs(y[i * out + j] - exact));
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < in; ++c) {
      double want = 0;
      for (int64_t j = 0; j < out; ++j) want += r(dy[i * out + j]) * w[j * in + c];
      worst_dx = std::max(worst_dx, std::fabs(dx[i * in + c] - want));
    }
  for (int64_t j = 0; j < out; ++j)
    for (int64_t c = 0; c < in; ++c) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += r(dy[i * out + j]) * r(x[i * in + c]);
      worst_dw = std::max(worst_dw, std::fabs(dw[j * in + c] - want));
    }
  CHECK(worst_y < 1e-5);
  CHECK(worst_dx < 1e-5);
  CHECK(worst_dw < 1e-5);
  CHECK(unrounded > 1e-4);  // x really was rounded: bf16 keeps 8 bits
  CHECK(unrounded < 0.1);
}

}  // namespace
}  // namespace ds::kernels::cpu
