#include "runtime/cuda/cuda_memory.h"

#include <algorithm>

#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_allocator_backend.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/stream_context.h"

namespace ds::cuda {

StatusOr<std::unique_ptr<CudaMemory>> CudaMemory::Create(int ordinal) {
  DS_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (ordinal < 0 || ordinal >= count)
    return UnavailableError("cuda:" + std::to_string(ordinal) + ": " + std::to_string(count) +
                            " CUDA device(s) visible" +
                            (count == 0 ? " (" + ProbeCudaDevices().reason + ")" : std::string()));
  std::unique_ptr<CudaMemory> m(new CudaMemory());
  m->ordinal_ = ordinal;
  DS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  DS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  m->name_ = "cuda:" + std::to_string(ordinal) + " (" + prop.name + ")";
  DS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking));
  DS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m->copy_stream_, cudaStreamNonBlocking));
  DS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m->compute_mark_, cudaEventDisableTiming));
  DS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&m->copies_done_, cudaEventDisableTiming));
  DS_ASSIGN_OR_RETURN(auto backend, CudaAllocatorBackend::Create(ordinal));
  m->allocator_ = std::make_unique<CachingAllocator>(std::move(backend));
  return m;
}

CudaMemory::~CudaMemory() {
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  if (stream_) cudaStreamSynchronize(stream_);
  allocator_.reset();  // returns every cached segment before the stream goes
  if (compute_mark_) cudaEventDestroy(compute_mark_);
  if (copies_done_) cudaEventDestroy(copies_done_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

// Note [Copy stream]
// An async copy waits (on the device) for the compute stream as it is at the call, runs on
// copy_stream_, and marks copies_done_ after itself. copy_stream_ runs copies in order, so
// copies_done_ always stands for every copy issued so far: WaitCopies synchronizes the host
// with it, OrderAfterCopies makes the compute stream wait for it (e.g. before zeroing the
// gradients just copied out). The destination should be AllocateHost memory: from pageable
// memory the driver would stage the copy through its own buffers, synchronously.
Status CudaMemory::CopyToHostAsync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_mark_, stream_));
  DS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, compute_mark_, 0));
  DS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
  DS_CUDA_RETURN_IF_ERROR(cudaEventRecord(copies_done_, copy_stream_));
  copies_pending_ = true;
  return OkStatus();
}

Status CudaMemory::Synchronize() {
  DS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

Status CudaMemory::WaitCopies() {
  if (!copies_pending_) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copies_done_));
  return OkStatus();
}

Status CudaMemory::OrderAfterCopies() {
  if (!copies_pending_) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, copies_done_, 0));
  return OkStatus();
}

StatusOr<void*> CudaMemory::AllocateHost(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (err != cudaSuccess)
    return ResourceExhaustedError(name_ + ": cannot allocate " + std::to_string(bytes) +
                                  " bytes of page-locked host memory: " + cudaGetErrorString(err));
  return p;
}

void CudaMemory::FreeHost(void* ptr) {
  if (ptr) cudaFreeHost(ptr);
}

StatusOr<void*> CudaMemory::Allocate(size_t bytes) {
  DS_ASSIGN_OR_RETURN(void* p, allocator_->Allocate(bytes, stream_));
  Status zero = Zero(p, bytes);
  if (!zero.ok()) {
    allocator_->Free(p).IgnoreError();
    return zero;
  }
  return p;
}

void CudaMemory::Free(void* ptr) { allocator_->Free(ptr).IgnoreError(); }

Status CudaMemory::Zero(void* ptr, size_t bytes) {
  if (bytes == 0) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr, 0, bytes, stream_));
  return OkStatus();
}

Status CudaMemory::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  // From pageable host memory the call returns once the source has been staged.
  DS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  return OkStatus();
}

Status CudaMemory::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return OkStatus();
}

Status CudaMemory::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  DS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  DS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

void CudaMemory::Bind() {
  cudaSetDevice(ordinal_);
  SetCurrentStream(stream_);
}

}  // namespace ds::cuda
