#include "runtime/cuda/device.h"

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_status.h"
#endif

namespace ds::cuda {
namespace {

DeviceProbe Probe() {
  DeviceProbe probe;
#if DS_HAVE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  probe.error = static_cast<int>(err);
  if (err == cudaSuccess) {
    probe.count = count;
    probe.reason = std::to_string(count) + " device(s)";
  } else {
    // The count is left unchanged on error; never trust it then.
    probe.reason = CudaErrorToStatus(err, nullptr, nullptr, 0).message();
    // The failed call also set this thread's last error; clear it so that a later
    // cudaGetLastError() (after a kernel launch) does not report the probe.
    (void)cudaGetLastError();
  }
#else
  probe.error = -1;
  probe.reason = "not called: built without the CUDA toolkit";
#endif
  return probe;
}

}  // namespace

bool CudaCompiledIn() {
#if DS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

const DeviceProbe& ProbeCudaDevices() {
  static const DeviceProbe* probe = new DeviceProbe(Probe());
  return *probe;
}

StatusOr<int> CudaDeviceCount() {
  const DeviceProbe& probe = ProbeCudaDevices();
#if DS_HAVE_CUDA
  const auto err = static_cast<cudaError_t>(probe.error);
  if (err != cudaSuccess && !IsNoDeviceError(err)) {
    return CudaErrorToStatus(err, "cudaGetDeviceCount", nullptr, 0);
  }
#endif
  return probe.count;
}

bool CudaAvailable() {
  StatusOr<int> count = CudaDeviceCount();
  return count.ok() && *count > 0;
}

}  // namespace ds::cuda
