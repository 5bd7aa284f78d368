// The CUDA backend plugin, loaded the way device.type cuda loads it, on any machine: with the
// toolkit the library loads (cudart needs no driver to load) and its kernel registrations land
// in this program's registry; then a machine without a GPU gets Unavailable naming the reason,
// one with a GPU gets CUDA memory that works. Without the toolkit the error says why.
#include "runtime/exec/cuda_loader.h"

#include <cstdlib>

#include <catch2/catch.hpp>

#include "kernels/registry.h"
#include "runtime/core/optimizer_kernels.h"

namespace ds::exec {
namespace {

// Stands in for a GPU's memory in the optimizer-kernel lookup (nothing is allocated).
class FakeCudaMemory final : public DeviceMemory {
 public:
  kernels::Device device() const override { return kernels::Device::kCuda; }
  std::string name() const override { return "cuda:fake"; }
  StatusOr<void*> Allocate(size_t) override { return UnavailableError("fake"); }
  void Free(void*) override {}
  Status Zero(void*, size_t) override { return UnavailableError("fake"); }
  Status CopyToDevice(void*, const void*, size_t) override { return UnavailableError("fake"); }
  Status CopyToHost(void*, const void*, size_t) override { return UnavailableError("fake"); }
  Status Copy(void*, const void*, size_t) override { return UnavailableError("fake"); }
  void Bind() override {}
};

TEST_CASE("CUDA backend: loads on demand and registers its kernels here", "[exec][cuda]") {
  CHECK(kernels::FindKernel("layernorm", kernels::Device::kCuda, DType::kF32) == nullptr);
  FakeCudaMemory fake;
  auto before = OptimizerKernels::Create(&fake);
  REQUIRE_FALSE(before.ok());
  CHECK(before.status().message().find("no optimizer kernels for cuda:fake") != std::string::npos);
  auto memory = LoadCudaMemory(0);
#if DS_HAVE_CUDA
  // Loading the plugin registered every op's CUDA kernels into this program's registry.
  for (const char* op : {"layernorm", "linear", "attention", "cross_entropy", "embedding"}) {
    INFO(op);
    CHECK(kernels::FindKernel(op, kernels::Device::kCuda, DType::kF32) != nullptr);
    CHECK(kernels::FindKernel(op, kernels::Device::kCuda, DType::kBF16) != nullptr);
  }
  // And its optimizer kernels (DeviceStates' AdamW and norm) into this program's registry.
  CHECK(OptimizerKernels::Create(&fake).ok());
  if (memory.ok()) {  // a GPU: round trip through device memory
    DeviceMemory& m = **memory;
    CHECK(m.device() == kernels::Device::kCuda);
    auto p = m.Allocate(64);
    REQUIRE(p.ok());
    const float in[4] = {1, 2, 3, 4};
    float out[4] = {};
    REQUIRE(m.CopyToDevice(*p, in, sizeof(in)).ok());
    REQUIRE(m.CopyToHost(out, *p, sizeof(out)).ok());
    CHECK(out[3] == 4.0f);
    m.Free(*p);
  } else {
    INFO(memory.status().ToString());
    CHECK(memory.status().code() == StatusCode::kUnavailable);
    CHECK(memory.status().message().find("CUDA device") != std::string::npos);
  }
#else
  REQUIRE_FALSE(memory.ok());
  CHECK(memory.status().message().find("libds_cuda.so could not be loaded") != std::string::npos);
#endif
}

// Without the NCCL plugin beside the program (this test does not carry it), the loader says
// NotFound, naming the file and where it looked: the worker's cue to use Gloo instead.
TEST_CASE("NCCL backend: a missing plugin is NotFound, naming where it looked", "[exec][cuda]") {
  setenv("DS_NCCL_BACKEND", "/nonexistent/libds_nccl.so", 1);
  FakeCudaMemory fake;
  auto comm = LoadNcclCommunicator(&fake, 0, 2, "dp", nullptr, std::chrono::milliseconds(100));
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().code() == StatusCode::kNotFound);
  CHECK(comm.status().message().find("libds_nccl.so could not be loaded") != std::string::npos);
  CHECK(comm.status().message().find("/nonexistent/libds_nccl.so: not found") != std::string::npos);
}

}  // namespace
}  // namespace ds::exec
