// Is there a usable CUDA GPU? The probe every CUDA code path starts from.
//
// This header includes no CUDA headers and the target builds without the toolkit (it then
// reports zero devices), so CPU-only code may ask too. Thread-safe: the first call probes
// (cudaGetDeviceCount) and the result is cached for the life of the process.
//
//   DS_ASSIGN_OR_RETURN(int gpus, cuda::CudaDeviceCount());
//   if (gpus == 0) return RunOnCpu();
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace ds::cuda {

// The raw outcome of probing, for messages ("SKIPPED: no CUDA device (...)").
struct DeviceProbe {
  int count = 0;       // devices visible to this process (0 unless error == 0)
  int error = 0;       // cudaError_t of cudaGetDeviceCount; -1: built without the toolkit
  std::string reason;  // "cudaErrorInsufficientDriver (35): CUDA driver version is ..."
};

// True when this build compiled the CUDA code (toolkit present at build time).
bool CudaCompiledIn();

// Probes once (cached). Never fails; see DeviceProbe.
const DeviceProbe& ProbeCudaDevices();

// Number of GPUs. 0, not an error, when there is no GPU: no driver (cudaErrorInsufficientDriver,
// 35), no device (cudaErrorNoDevice, 100) or a build without the toolkit. Any other CUDA
// error (a broken driver install, say) is returned as a Status.
StatusOr<int> CudaDeviceCount();

// CudaDeviceCount() is OK and positive.
bool CudaAvailable();

}  // namespace ds::cuda
