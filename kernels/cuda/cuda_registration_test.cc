// CPU-side checks of the CUDA kernel registrations (no GPU needed; runs in tools/test.sh):
//  - every op with a CPU kernel has CUDA kernels for f32 and bf16, except the ops listed
//    in DS_CUDA_PENDING_OPS (BUILD.bazel), which must still lack one, so the list cannot
//    go stale;
//  - the glue rejects a tensor of the wrong dtype with InvalidArgument before launching;
//  - on a machine without a GPU a CUDA kernel returns Unavailable instead of crashing;
//  - SplitOptimizerSegments cuts parameters into launch segments.
#include <cuda_bf16.h>

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/cuda/optimizer_launch.h"
#include "kernels/cuda/pending_ops_testing.h"
#include "kernels/registry.h"
#include "runtime/cuda/device.h"

namespace ds::kernels {
namespace {

TEST_CASE("every CPU op has CUDA kernels for f32, bf16 and f16", "[cuda][registry]") {
  const std::set<std::string> pending = PendingCudaOps();
  std::string missing, stale;
  int checked = 0;
  for (const std::string& op : RegisteredOps()) {
    if (FindKernel(op, Device::kCpu, DType::kF32) == nullptr) continue;
    ++checked;
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Kernel* k = FindKernel(op, Device::kCuda, dt);
      const bool have = k != nullptr && k->forward && k->backward;
      if (pending.count(op)) {
        if (have) stale += " " + op + "/" + DTypeName(dt);
      } else if (!have) {
        missing += " " + op + "/" + DTypeName(dt);
      }
    }
  }
  INFO("ops without a CUDA kernel:" << missing);
  CHECK(missing.empty());
  INFO("listed as pending in DS_CUDA_PENDING_OPS but registered now (drop them):" << stale);
  CHECK(stale.empty());
  CHECK(checked >= 13);
}

TEST_CASE("CUDA kernels reject tensors of another dtype before launching", "[cuda][registry]") {
  const Kernel* k = FindKernel("gelu", Device::kCuda, DType::kBF16);
  REQUIRE(k != nullptr);
  float x = 0.f, y = 0.f;  // never touched: the dtype check fails first
  OpArgs args;
  args.in = {Tensor(&x, {1}, DType::kF32)};
  args.out = {Tensor(&y, {1}, DType::kF32)};
  const Status s = k->forward(args);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("gelu") && Catch::Contains("f32"));
}

TEST_CASE("without a GPU a CUDA kernel returns Unavailable", "[cuda][registry]") {
  if (ds::cuda::CudaAvailable()) return;  // covered by conformance_gpu_test on a GPU
  const Kernel* k = FindKernel("add", Device::kCuda, DType::kF32);
  REQUIRE(k != nullptr);
  float a = 1.f, b = 2.f, y = 0.f;
  OpArgs args;
  args.in = {Tensor(&a, {1}, DType::kF32), Tensor(&b, {1}, DType::kF32)};
  args.out = {Tensor(&y, {1}, DType::kF32)};
  const Status s = k->forward(args);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(y == 0.f);
}

TEST_CASE("SplitOptimizerSegments cuts parameters into bounded segments", "[cuda][optim]") {
  const int64_t c = kOptimizerChunk;
  const std::vector<AdamWSegment> segs =
      SplitOptimizerSegments({{0, 2 * c + 5, true}, {2 * c + 5, 0, false}, {2 * c + 5, 7, false}});
  REQUIRE(segs.size() == 4);
  CHECK(segs[0].offset == 0);
  CHECK(segs[0].numel == c);
  CHECK(segs[1].offset == c);
  CHECK(segs[2].offset == 2 * c);
  CHECK(segs[2].numel == 5);
  CHECK(segs[2].decay == 1);
  CHECK(segs[3].offset == 2 * c + 5);
  CHECK(segs[3].numel == 7);
  CHECK(segs[3].decay == 0);
}

}  // namespace
}  // namespace ds::kernels
