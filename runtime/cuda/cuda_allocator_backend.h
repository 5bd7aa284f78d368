// CudaAllocatorBackend: the CachingAllocator's device calls on a real GPU: cudaMalloc,
// cudaFree, and timing-free events (cudaEventRecord / cudaEventQuery). Needs the toolkit:
// the target is empty without it.
//
// Each call makes `device` current for its duration and restores the caller's device.
// Used under the allocator's mutex; not meant to be shared.
//
//   DS_ASSIGN_OR_RETURN(auto backend, cuda::CudaAllocatorBackend::Create(/*device=*/0));
//   cuda::CachingAllocator alloc(std::move(backend));
#pragma once

#include <memory>

#include "runtime/base/status.h"
#include "runtime/cuda/caching_allocator.h"

namespace ds::cuda {

class CudaAllocatorBackend final : public AllocatorBackend {
 public:
  // Unavailable when there is no such device (or no GPU at all).
  static StatusOr<std::unique_ptr<CudaAllocatorBackend>> Create(int device);

  // ResourceExhausted for cudaErrorMemoryAllocation (the error is cleared, so it does not
  // surface later from cudaGetLastError).
  StatusOr<void*> Malloc(size_t bytes) override;
  Status Free(void* ptr) override;
  StatusOr<EventHandle> CreateEvent() override;
  void DestroyEvent(EventHandle event) override;
  Status RecordEvent(EventHandle event, StreamHandle stream) override;
  StatusOr<bool> QueryEvent(EventHandle event) override;

  int device() const { return device_; }

 private:
  explicit CudaAllocatorBackend(int device) : device_(device) {}
  const int device_;
};

}  // namespace ds::cuda
