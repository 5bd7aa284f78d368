// CUDA runtime errors -> ds::Status, at the edge where a CUDA call is made (STYLE 3.3).
// Thread-safe (pure functions). Needs the toolkit: the target is empty without it.
//
//   Status Upload(void* dst, const void* src, size_t bytes) {
//     DS_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
//     return OkStatus();
//   }
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/base/status.h"

namespace ds::cuda {

// Maps a cudaError_t to a canonical code (no device / no driver -> Unavailable, out of
// memory -> ResourceExhausted, invalid value -> InvalidArgument, otherwise Internal) and
// a message "file:line: expr: cudaErrorName (code): description". `expr`, `file` may be
// null. Precondition: err != cudaSuccess (cudaSuccess gives OK).
Status CudaErrorToStatus(cudaError_t err, const char* expr, const char* file, int line);

// True for the errors that mean "this machine has no usable GPU": 35
// (cudaErrorInsufficientDriver, no driver installed) and 100 (cudaErrorNoDevice).
bool IsNoDeviceError(cudaError_t err);

}  // namespace ds::cuda

// Evaluates a CUDA runtime call once; on failure returns its Status from the caller.
// Note: kernel launch errors surface from cudaGetLastError(), which the Launch*
// functions in kernels/cuda/ return.
#define DS_CUDA_RETURN_IF_ERROR(call)                                                \
  do {                                                                               \
    const cudaError_t _ds_cuda_err = (call);                                         \
    if (_ds_cuda_err != cudaSuccess)                                                 \
      return ::ds::cuda::CudaErrorToStatus(_ds_cuda_err, #call, __FILE__, __LINE__); \
  } while (0)
