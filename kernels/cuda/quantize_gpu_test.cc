// GPU test: ZeRO++'s block quantization on the device (quantize.cu) gives the host's bytes
// (runtime/core/quantize.h, itself checked against fp64 in quantize_test): int8 and int4, fp32
// and bf16 sources and outputs, short last blocks, a zero block. Needs a GPU: without one it
// prints one SKIPPED line and exits 77 (README.md).
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/quantize.h"

#if DS_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/quantize_launch.h"
#include "tests/testing/device_copies.h"

namespace ds::kernels {
namespace {

using testing::Download;
using testing::Upload;

TEST_CASE("block quantization: the device gives the host's bytes", "[gpu][quantize]") {
  const int64_t n = 100003;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(gen);
  for (int64_t i = 0; i < 4096; ++i) x[5000 + i] = 0.f;  // whole zero blocks
  std::vector<uint16_t> xb(n);
  RoundToBf16Run(x.data(), xb.data(), n);
  for (int bits : {8, 4})
    for (int64_t block : {int64_t{64}, int64_t{2048}}) {
      INFO("bits " << bits << ", block " << block);
      const QuantSpec s{bits, block};
      std::vector<int8_t> q(QuantizedValueBytes(n, s));
      std::vector<float> scales(QuantBlocks(n, s)), y(n);
      Quantize(x.data(), n, s, q.data(), scales.data());
      Dequantize(q.data(), scales.data(), n, s, y.data());
      float* dx = Upload(x);
      int8_t* dq = Upload(std::vector<int8_t>(q.size()));
      float* ds = Upload(std::vector<float>(scales.size()));
      float* dy = Upload(std::vector<float>(n));
      REQUIRE(LaunchBlockQuantize(dx, n, bits, block, dq, ds, nullptr) == cudaSuccess);
      CHECK(Download(dq, q.size()) == q);
      CHECK(Download(ds, scales.size()) == scales);
      REQUIRE(LaunchBlockDequantize(dq, ds, n, bits, block, dy, nullptr) == cudaSuccess);
      CHECK(Download(dy, n) == y);
      // bf16 in and out.
      std::vector<int8_t> qb(q.size());
      std::vector<float> sb(scales.size());
      std::vector<uint16_t> yb(n);
      QuantizeBf16(xb.data(), n, s, qb.data(), sb.data());
      DequantizeBf16(qb.data(), sb.data(), n, s, yb.data());
      auto* dxb = reinterpret_cast<__nv_bfloat16*>(Upload(xb));
      auto* dyb = reinterpret_cast<__nv_bfloat16*>(Upload(std::vector<uint16_t>(n)));
      REQUIRE(LaunchBlockQuantize(dxb, n, bits, block, dq, ds, nullptr) == cudaSuccess);
      CHECK(Download(dq, q.size()) == qb);
      REQUIRE(LaunchBlockDequantize(dq, ds, n, bits, block, dyb, nullptr) == cudaSuccess);
      CHECK(Download(reinterpret_cast<uint16_t*>(dyb), n) == yb);
      for (void* p : {static_cast<void*>(dx), static_cast<void*>(dq), static_cast<void*>(ds),
                      static_cast<void*>(dy), static_cast<void*>(dxb), static_cast<void*>(dyb)})
        cudaFree(p);
    }
  CHECK(LaunchBlockQuantize(static_cast<const float*>(nullptr), 8, 4, 3, nullptr, nullptr,
                            nullptr) == cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::kernels
#endif  // DS_HAVE_CUDA
