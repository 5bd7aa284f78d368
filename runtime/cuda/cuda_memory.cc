#include "runtime/cuda/cuda_memory.h"

#include "kernels/cuda/stream_context.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_allocator_backend.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/device.h"

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
  DS_ASSIGN_OR_RETURN(auto backend, CudaAllocatorBackend::Create(ordinal));
  m->allocator_ = std::make_unique<CachingAllocator>(std::move(backend));
  return m;
}

CudaMemory::~CudaMemory() {
  if (stream_) cudaStreamSynchronize(stream_);
  allocator_.reset();  // returns every cached segment before the stream goes
  if (stream_) cudaStreamDestroy(stream_);
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
  kernels::SetCurrentStream(stream_);
}

}  // namespace ds::cuda
