// Host memory for O_DIRECT I/O: page-aligned, its capacity rounded up to whole alignment units
// so that a transfer of any size can be padded to the device's granularity inside it.
// BufferPool hands out a fixed set of them, allocated once (never in the step loop).
//
//   DS_ASSIGN_OR_RETURN(BufferPool pool, BufferPool::Create(4, 8 << 20));
//   AlignedBuffer* b = pool.Acquire();  ... pool.Release(b);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/base/status.h"

namespace ds::zero {

// O_DIRECT offset, length and address granularity used everywhere: 4 KiB covers NVMe and the
// 512-byte devices (statx DIOALIGN reports 512 on this machine kind's ext4).
inline constexpr int64_t kIoAlign = 4096;

inline int64_t AlignUpIo(int64_t n) { return (n + kIoAlign - 1) / kIoAlign * kIoAlign; }

class AlignedBuffer {
 public:
  // ResourceExhausted when the memory cannot be allocated. The bytes are zeroed.
  static StatusOr<AlignedBuffer> Allocate(int64_t bytes);
  AlignedBuffer() = default;

  void* data() const { return data_.get(); }
  // Allocated bytes: a multiple of kIoAlign, >= what was asked.
  int64_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  int64_t capacity_ = 0;
};

// A fixed set of equal AlignedBuffers. Thread-safe.
class BufferPool {
 public:
  static StatusOr<std::unique_ptr<BufferPool>> Create(int count, int64_t bytes);

  // A free buffer, or nullptr when all are in use.
  AlignedBuffer* Acquire();
  void Release(AlignedBuffer* buffer);
  int count() const { return static_cast<int>(buffers_.size()); }
  int64_t buffer_bytes() const { return buffers_.empty() ? 0 : buffers_[0].capacity(); }

 private:
  std::vector<AlignedBuffer> buffers_;
  std::mutex mu_;
  std::vector<AlignedBuffer*> free_;  // guarded by mu_
};

}  // namespace ds::zero
