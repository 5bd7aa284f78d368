// CudaMemory: the DeviceMemory of one GPU (runtime/core/device_memory.h). Allocations come
// from the caching allocator (runtime/cuda/caching_allocator.h) on the memory's own stream;
// zeroing, copies and the kernels an Executor launches after Bind() are queued on that stream
// in order. CopyToHost waits for the stream; CopyToDevice returns once the host bytes may be
// reused. Needs the toolkit: the target is empty without it.
//
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaMemory> gpu, cuda::CudaMemory::Create(0));
//   ExecutorOptions o{batch, seq, true, gpu.get()};
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "runtime/core/device_memory.h"
#include "runtime/cuda/caching_allocator.h"

namespace ds::cuda {

class CudaMemory final : public DeviceMemory {
 public:
  // Device `ordinal` of this process (after CUDA_VISIBLE_DEVICES). Unavailable, with the
  // probe's reason, when there is no such device.
  static StatusOr<std::unique_ptr<CudaMemory>> Create(int ordinal);
  ~CudaMemory() override;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  Status Zero(void* ptr, size_t bytes) override;
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  Status Copy(void* dst, const void* src, size_t bytes) override;
  Status CopyToHostAsync(void* dst, const void* src, size_t bytes) override;
  Status WaitCopies() override;
  Status Synchronize() override;
  Status OrderAfterCopies() override;
  StatusOr<void*> AllocateHost(size_t bytes) override;
  void FreeHost(void* ptr) override;
  void Bind() override;
  int ordinal() const override { return ordinal_; }
  void* native_stream() const override { return stream_; }

  AllocatorStats stats() const { return allocator_->stats(); }
  cudaStream_t stream() const { return stream_; }

 private:
  CudaMemory() = default;
  int ordinal_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // CopyToHostAsync
  cudaEvent_t compute_mark_ = nullptr;  // recorded on stream_ before each async copy
  cudaEvent_t copies_done_ = nullptr;   // recorded on copy_stream_ after each async copy
  bool copies_pending_ = false;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace ds::cuda
