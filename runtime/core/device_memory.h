// DeviceMemory: where an Executor keeps its activations, gradients and its copy of the
// parameters, and how bytes move between that memory and the host. The Executor runs the
// kernels registered for device() on it.
//
//   HostMemory    ordinary host memory and the CPU kernels: the executor's device path run
//                 on the CPU, which the tests use to check that path against the host one
//   CudaMemory    GPU memory from the caching allocator, one stream (runtime/cuda/cuda_memory.h)
//
// Copies and zeroing are ordered with the kernels the executor launches (CUDA: the same
// stream); CopyToHost returns once the bytes are on the host. CopyToHostAsync instead runs on
// a copy stream, after an event recorded on the compute stream, so the compute stream goes on
// while the bytes move (CUDA: into page-locked AllocateHost memory); WaitCopies and
// OrderAfterCopies order the host and the compute stream after those copies. Used by one
// thread at a time.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/base/status.h"
#include "runtime/core/device.h"

namespace ds {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The kernels that run on this memory.
  virtual Device device() const = 0;
  // "cpu (host memory)", "cuda:0 (NVIDIA H200)": for logs and errors.
  virtual std::string name() const = 0;
  // `bytes` of zeroed memory, 256-byte aligned; ResourceExhausted names the request.
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual Status Zero(void* ptr, size_t bytes) = 0;
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Within this memory (dst and src do not overlap), ordered like the rest.
  virtual Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // Device -> host after the work queued so far, on the copy stream; returns at once.
  // The defaults copy synchronously (host memory has nothing to overlap).
  virtual Status CopyToHostAsync(void* dst, const void* src, size_t bytes) {
    return CopyToHost(dst, src, bytes);
  }
  // Returns once every CopyToHostAsync issued so far has landed on the host.
  virtual Status WaitCopies() { return OkStatus(); }
  // Work queued on the compute stream from now on starts after those copies (so it may
  // overwrite their sources); the host does not wait.
  virtual Status OrderAfterCopies() { return OkStatus(); }
  // Returns once everything queued on the compute stream has run (profiles time kernels so).
  virtual Status Synchronize() { return OkStatus(); }
  // Host memory for CopyToHostAsync destinations (CUDA: page-locked, so the copy is a DMA).
  virtual StatusOr<void*> AllocateHost(size_t bytes);
  virtual void FreeHost(void* ptr);
  // Makes this memory's stream the one kernels launched from the calling thread use.
  virtual void Bind() = 0;
  // For libraries that order their work with this memory's (NCCL): the device ordinal and
  // the native stream handle (CUDA: a cudaStream_t). -1 and null on the host.
  virtual int ordinal() const { return -1; }
  virtual void* native_stream() const { return nullptr; }
};

class HostMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu (host memory)"; }
  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  Status Zero(void* ptr, size_t bytes) override;
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  Status Copy(void* dst, const void* src, size_t bytes) override;
  void Bind() override {}
};

// Owns one allocation of a DeviceMemory. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> Allocate(DeviceMemory* memory, size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();
  DeviceMemory* memory_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ds
