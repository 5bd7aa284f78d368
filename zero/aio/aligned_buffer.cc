#include "zero/aio/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace ds::zero {

void AlignedBuffer::Free::operator()(void* p) const { std::free(p); }

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(int64_t bytes) {
  if (bytes < 0)
    return InvalidArgumentError("AlignedBuffer: negative size " + std::to_string(bytes));
  AlignedBuffer b;
  b.capacity_ = AlignUpIo(std::max<int64_t>(bytes, 1));
  void* p = nullptr;
  if (posix_memalign(&p, kIoAlign, static_cast<size_t>(b.capacity_)) != 0)
    return ResourceExhaustedError("AlignedBuffer: cannot allocate " + std::to_string(b.capacity_) +
                                  " bytes aligned to " + std::to_string(kIoAlign));
  std::memset(p, 0, static_cast<size_t>(b.capacity_));
  b.data_.reset(p);
  return b;
}

StatusOr<std::unique_ptr<BufferPool>> BufferPool::Create(int count, int64_t bytes) {
  if (count < 1)
    return InvalidArgumentError("BufferPool: count must be >= 1, got " + std::to_string(count));
  auto pool = std::make_unique<BufferPool>();
  pool->buffers_.reserve(count);
  for (int i = 0; i < count; ++i) {
    StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(bytes);
    if (!b.ok()) return b.status();
    pool->buffers_.push_back(std::move(b).value());
  }
  for (AlignedBuffer& b : pool->buffers_) pool->free_.push_back(&b);
  return pool;
}

AlignedBuffer* BufferPool::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return nullptr;
  AlignedBuffer* b = free_.back();
  free_.pop_back();
  return b;
}

void BufferPool::Release(AlignedBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(buffer);
}

}  // namespace ds::zero
