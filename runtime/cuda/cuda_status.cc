#include "runtime/cuda/cuda_status.h"

#include <string>

namespace ds::cuda {
namespace {

StatusCode CodeFor(cudaError_t err) {
  switch (err) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
      return StatusCode::kUnavailable;
    case cudaErrorMemoryAllocation:
      return StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevice:
      return StatusCode::kInvalidArgument;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

bool IsNoDeviceError(cudaError_t err) {
  return err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice;
}

Status CudaErrorToStatus(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return OkStatus();
  std::string msg;
  if (file != nullptr) msg += std::string(file) + ":" + std::to_string(line) + ": ";
  if (expr != nullptr) msg += std::string(expr) + ": ";
  // Both functions return static strings and work without a driver.
  msg += std::string(cudaGetErrorName(err)) + " (" + std::to_string(static_cast<int>(err)) +
         "): " + cudaGetErrorString(err);
  return Status(CodeFor(err), std::move(msg));
}

}  // namespace ds::cuda
