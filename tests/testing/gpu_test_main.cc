// main() of every GPU test (Bazel tag "gpu"; kernels/cuda/README.md): probes for a CUDA
// device before Catch2 runs anything.
//   no device or no driver  prints one "SKIPPED: no CUDA device (...)" line, exits 77
//                           (tools/test.sh counts it as skipped, never as passed)
//   any other probe error   prints "FAILED: ..." and exits 1, so a broken driver on a GPU
//                           machine is not hidden as a skip
//   a device                runs the Catch2 test cases and returns their result
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "runtime/cuda/device.h"

int main(int argc, char** argv) {
  const ds::StatusOr<int> count = ds::cuda::CudaDeviceCount();
  const ds::cuda::DeviceProbe& probe = ds::cuda::ProbeCudaDevices();
  if (!count.ok()) {
    std::printf("FAILED: cudaGetDeviceCount: %s\n", count.status().message().c_str());
    return 1;
  }
  if (*count == 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n", probe.reason.c_str());
    std::fflush(stdout);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
