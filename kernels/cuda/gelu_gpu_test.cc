// GPU test: the CUDA GELU (forward, accumulating backward) and the cuBLAS fp32 GEMM
// against CPU references computed here in double precision.
//
// Needs a GPU. Without one it prints "SKIPPED: no CUDA device (cudaGetDeviceCount: ...)"
// and exits 77, the skip code of the gpu-tag convention (kernels/cuda/README.md); it never
// reports a pass it did not earn. Any other probe failure (a broken driver) exits 1.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/cuda/device.h"
#include "tests/testing/test_values.h"

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/gelu_launch.h"
#include "kernels/cuda/gemm.h"

namespace ds::kernels {
namespace {

// A typed null pointer: the launchers have float and bf16 overloads.
constexpr const float* kNoFloat = nullptr;

// Device copy of a host vector; frees on destruction.
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<float>& host) : n_(host.size()) {
    REQUIRE(cudaMalloc(&ptr_, bytes()) == cudaSuccess);
    REQUIRE(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  ~DeviceVector() { cudaFree(ptr_); }
  float* get() const { return ptr_; }
  std::vector<float> Download() const {
    std::vector<float> host(n_);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }

 private:
  size_t bytes() const { return n_ * sizeof(float); }
  size_t n_;
  float* ptr_ = nullptr;
};

constexpr double kScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

double GeluRef(double x) { return 0.5 * x * (1.0 + std::tanh(kScale * (x + kCubic * x * x * x))); }

double GeluGradRef(double x) {
  const double t = std::tanh(kScale * (x + kCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kScale * (1.0 + 3.0 * kCubic * x * x);
}

// Inputs cover the tails (|x| up to 12, where tanh saturates) and exact zeros.
std::vector<float> GeluInputs(int64_t n) {
  std::vector<float> x = testing::RandomValues(n, -12.0f, 12.0f, n);
  for (int64_t i = 0; i < n; i += 97) x[i] = 0.0f;
  return x;
}

TEST_CASE("CUDA GELU forward matches the CPU reference", "[cuda][gelu]") {
  // 16777216 + 1000 exceeds one grid (65536 blocks x 256 threads): the grid-stride loop.
  const int64_t n =
      GENERATE(int64_t{1}, int64_t{257}, int64_t{(1 << 20) + 3}, int64_t{16777216 + 1000});
  CAPTURE(n);
  const std::vector<float> x = GeluInputs(n);
  DeviceVector dx(x), dy(std::vector<float>(n, -1.0f));
  REQUIRE(LaunchGeluForward(dx.get(), dy.get(), n, nullptr) == cudaSuccess);
  const std::vector<float> y = dy.Download();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref = GeluRef(x[i]);
    if (std::fabs(y[i] - ref) > 1e-6 + 2e-6 * std::fabs(ref) + 1e-6 * std::fabs(x[i])) {
      if (bad++ < 5) WARN("i=" << i << " x=" << x[i] << " y=" << y[i] << " ref=" << ref);
    }
  }
  CHECK(bad == 0);
  // The reference is the tanh form (GPT-2), not the erf form (0.8413447).
  CHECK(GeluRef(1.0) == Approx(0.8411920).margin(1e-6));
}

TEST_CASE("CUDA GELU forward works in place", "[cuda][gelu]") {
  const std::vector<float> x = GeluInputs(4099);
  DeviceVector d(x);
  REQUIRE(LaunchGeluForward(d.get(), d.get(), 4099, nullptr) == cudaSuccess);
  const std::vector<float> y = d.Download();
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == Approx(GeluRef(x[i])).margin(1e-5));
}

TEST_CASE("CUDA GELU backward accumulates into dx", "[cuda][gelu]") {
  const int64_t n = GENERATE(int64_t{1}, int64_t{1000}, int64_t{16777216 + 1000});
  CAPTURE(n);
  const std::vector<float> x = GeluInputs(n);
  const std::vector<float> g = testing::RandomValues(n, -2.0f, 2.0f, n + 1);
  const std::vector<float> dx0 = testing::RandomValues(n, -1.0f, 1.0f, n + 2);
  DeviceVector d_x(x), d_g(g), d_dx(dx0);
  // Twice: dx = dx0 + 2 * g * gelu'(x) shows it adds rather than overwrites.
  REQUIRE(LaunchGeluBackward(d_x.get(), d_g.get(), d_dx.get(), n, nullptr) == cudaSuccess);
  REQUIRE(LaunchGeluBackward(d_x.get(), d_g.get(), d_dx.get(), n, nullptr) == cudaSuccess);
  const std::vector<float> dx = d_dx.Download();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref = dx0[i] + 2.0 * g[i] * GeluGradRef(x[i]);
    if (std::fabs(dx[i] - ref) > 1e-5 * (1.0 + std::fabs(ref) + std::fabs(g[i]))) {
      if (bad++ < 5) WARN("i=" << i << " x=" << x[i] << " dx=" << dx[i] << " ref=" << ref);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("CUDA GELU: empty and negative sizes", "[cuda][gelu]") {
  CHECK(LaunchGeluForward(kNoFloat, nullptr, 0, nullptr) == cudaSuccess);
  CHECK(LaunchGeluBackward(kNoFloat, nullptr, nullptr, 0, nullptr) == cudaSuccess);
  CHECK(LaunchGeluForward(kNoFloat, nullptr, -1, nullptr) == cudaErrorInvalidValue);
}

// Row-major C = alpha * op(A) op(B) + beta * C in double.
std::vector<double> GemmRef(const GemmParams& p, const std::vector<float>& a,
                            const std::vector<float>& b, const std::vector<float>& c) {
  std::vector<double> out(p.m * p.n);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double av = p.trans_a ? a[l * p.m + i] : a[i * p.k + l];
        const double bv = p.trans_b ? b[j * p.k + l] : b[l * p.n + j];
        acc += av * bv;
      }
      out[i * p.n + j] = p.alpha * acc + p.beta * c[i * p.n + j];
    }
  }
  return out;
}

TEST_CASE("cuBLAS GEMM (row-major, all transposes) matches the CPU reference", "[cuda][gemm]") {
  StatusOr<CublasHandle> handle = CublasHandle::Create();
  REQUIRE(handle.ok());
  struct Dims {
    int64_t m, n, k;
  };
  const Dims dims = GENERATE(Dims{1, 1, 1}, Dims{64, 64, 64}, Dims{127, 33, 65},
                             Dims{256, 512, 128}, Dims{3, 700, 1024});
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  GemmParams p;
  p.m = dims.m;
  p.n = dims.n;
  p.k = dims.k;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.alpha = 1.5f;
  p.beta = 0.5f;
  CAPTURE(p.m, p.n, p.k, p.trans_a, p.trans_b);
  const std::vector<float> a = testing::RandomValues(p.m * p.k, -1.0f, 1.0f, 11);
  const std::vector<float> b = testing::RandomValues(p.k * p.n, -1.0f, 1.0f, 12);
  const std::vector<float> c0 = testing::RandomValues(p.m * p.n, -1.0f, 1.0f, 13);
  DeviceVector da(a), db(b), dc(c0);
  REQUIRE(CudaGemmF32(*handle, nullptr, p, da.get(), db.get(), dc.get()).ok());
  const std::vector<float> c = dc.Download();
  const std::vector<double> ref = GemmRef(p, a, b, c0);
  // fp32 accumulation of k products of magnitude <= 1. TF32 (10-bit mantissa) would
  // exceed this bound about tenfold: CudaGemmF32 promises true fp32.
  const double tol = 1e-6 * static_cast<double>(p.k) + 1e-5;
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(c[i] - ref[i]));
  CAPTURE(worst, tol);
  CHECK(worst <= tol);
}

TEST_CASE("cuBLAS GEMM: argument errors and empty shapes", "[cuda][gemm]") {
  StatusOr<CublasHandle> handle = CublasHandle::Create();
  REQUIRE(handle.ok());
  GemmParams p;
  p.m = -1;
  CHECK(CudaGemmF32(*handle, nullptr, p, nullptr, nullptr, nullptr).code() ==
        StatusCode::kInvalidArgument);
  p.m = 0;
  p.n = 4;
  p.k = 4;
  CHECK(CudaGemmF32(*handle, nullptr, p, nullptr, nullptr, nullptr).ok());
  p.m = 4;
  CHECK(CudaGemmF32(*handle, nullptr, p, nullptr, nullptr, nullptr).code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::kernels
#endif  // DS_HAVE_CUDA
