#include "runtime/core/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/base/status_macros.h"

namespace ds {

StatusOr<void*> HostMemory::Allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p)
    return ResourceExhaustedError("host memory: cannot allocate " + std::to_string(bytes) +
                                  " bytes");
  std::memset(p, 0, rounded);
  return p;
}

void HostMemory::Free(void* ptr) { std::free(ptr); }

StatusOr<void*> DeviceMemory::AllocateHost(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p)
    return ResourceExhaustedError("host memory: cannot allocate " + std::to_string(bytes) +
                                  " bytes");
  return p;
}

void DeviceMemory::FreeHost(void* ptr) { std::free(ptr); }

Status HostMemory::Zero(void* ptr, size_t bytes) {
  std::memset(ptr, 0, bytes);
  return OkStatus();
}

Status HostMemory::Copy(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return OkStatus();
}

Status HostMemory::CopyToDevice(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return OkStatus();
}

Status HostMemory::CopyToHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return OkStatus();
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(DeviceMemory* memory, size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  DS_ASSIGN_OR_RETURN(b.data_, memory->Allocate(bytes));
  b.memory_ = memory;
  b.size_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    std::swap(memory_, o.memory_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (memory_ && data_) memory_->Free(data_);
  memory_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ds
