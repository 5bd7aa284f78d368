#include "runtime/cuda/cuda_allocator_backend.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_status.h"

namespace ds::cuda {
namespace {

// Makes `device` current and restores the previous device on destruction.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) status_ = cudaSetDevice(device);
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && status_ == cudaSuccess) (void)cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace

StatusOr<std::unique_ptr<CudaAllocatorBackend>> CudaAllocatorBackend::Create(int device) {
  int count = 0;
  DS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return UnavailableError("CudaAllocatorBackend: no CUDA device " + std::to_string(device) +
                            " (" + std::to_string(count) + " visible)");
  }
  return std::unique_ptr<CudaAllocatorBackend>(new CudaAllocatorBackend(device));
}

StatusOr<void*> CudaAllocatorBackend::Malloc(size_t bytes) {
  ScopedDevice guard(device_);
  DS_CUDA_RETURN_IF_ERROR(guard.status());
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later launches do not report it
    return ResourceExhaustedError("cudaMalloc(" + std::to_string(bytes) + ") on device " +
                                  std::to_string(device_) + ": out of memory");
  }
  DS_CUDA_RETURN_IF_ERROR(err);
  return ptr;
}

Status CudaAllocatorBackend::Free(void* ptr) {
  ScopedDevice guard(device_);
  DS_CUDA_RETURN_IF_ERROR(guard.status());
  DS_CUDA_RETURN_IF_ERROR(cudaFree(ptr));
  return OkStatus();
}

StatusOr<EventHandle> CudaAllocatorBackend::CreateEvent() {
  ScopedDevice guard(device_);
  DS_CUDA_RETURN_IF_ERROR(guard.status());
  cudaEvent_t event = nullptr;
  DS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return static_cast<EventHandle>(event);
}

void CudaAllocatorBackend::DestroyEvent(EventHandle event) {
  ScopedDevice guard(device_);
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status CudaAllocatorBackend::RecordEvent(EventHandle event, StreamHandle stream) {
  ScopedDevice guard(device_);
  DS_CUDA_RETURN_IF_ERROR(guard.status());
  DS_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  return OkStatus();
}

StatusOr<bool> CudaAllocatorBackend::QueryEvent(EventHandle event) {
  // cudaEventQuery needs no current device: the event carries its own.
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  DS_CUDA_RETURN_IF_ERROR(err);
  return false;
}

}  // namespace ds::cuda
