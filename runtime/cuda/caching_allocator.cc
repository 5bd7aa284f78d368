// CachingAllocator: pools of free blocks, best fit, split and merge, event-deferred reuse.
//
// Blocks of one device segment form a doubly linked list in address order (prev/next). A
// block is in exactly one state: allocated (in allocated_), free and cached (in its pool),
// or freed but waiting for events recorded on other streams (in neither; pending_events_
// holds it, event_count > 0). Only cached blocks merge.
#include "runtime/cuda/caching_allocator.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <tuple>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::cuda {

struct CachingAllocator::Block {
  void* ptr = nullptr;
  size_t size = 0;       // bytes, a multiple of kRound
  size_t requested = 0;  // bytes asked for (allocated blocks only)
  StreamHandle stream = nullptr;
  bool small = false;      // belongs to the small pool
  bool allocated = false;  // handed out
  bool cached = false;     // in its pool
  Block* prev = nullptr;   // neighbours in the same segment
  Block* next = nullptr;
  std::vector<StreamHandle> stream_uses;  // other streams (RecordStream)
  int event_count = 0;                    // events still to complete before reuse
};

// Pools are ordered by stream, then size, then address: lower_bound({stream, size}) is the
// best fit on that stream.
bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  const auto key = [](const Block* x) {
    return std::make_tuple(reinterpret_cast<uintptr_t>(x->stream), x->size,
                           reinterpret_cast<uintptr_t>(x->ptr));
  };
  return key(a) < key(b);
}

std::string FormatBytes(size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[unit]);
  return buf;
}

namespace {

std::string StreamName(StreamHandle stream) {
  if (stream == nullptr) return "the default stream";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "stream 0x%" PRIxPTR, reinterpret_cast<uintptr_t>(stream));
  return buf;
}

size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

}  // namespace

size_t CachingAllocator::RoundSize(size_t bytes) { return RoundUp(bytes, kRound); }

size_t CachingAllocator::SegmentSize(size_t rounded) {
  return rounded <= kSmallRequest ? kSmallSegment : RoundUp(rounded, kLargeRound);
}

CachingAllocator::CachingAllocator(std::unique_ptr<AllocatorBackend> backend)
    : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  // Blocks waiting for events: the device may still use them, so forget rather than reuse;
  // their segments are released below only if every block of the segment is free.
  for (const PendingEvent& p : pending_events_) backend_->DestroyEvent(p.event);
  for (EventHandle e : free_events_) backend_->DestroyEvent(e);
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (Block* b : *pool) {
      if (b->prev == nullptr && b->next == nullptr) {
        backend_->Free(b->ptr).IgnoreError();
        delete b;
      }
    }
  }
  if (!allocated_.empty()) {
    DS_LOG_WARN("exec", "caching allocator destroyed with {} block(s) ({}) still allocated",
                allocated_.size(), FormatBytes(stats_.allocated_bytes));
  }
}

StatusOr<void*> CachingAllocator::Allocate(size_t bytes, StreamHandle stream) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(ProcessEvents());
  const size_t rounded = RoundSize(bytes);
  if (rounded < bytes) {  // wrapped around
    return InvalidArgumentError("allocation of " + std::to_string(bytes) + " bytes is too large");
  }
  Pool& pool = PoolFor(rounded);
  Block* block = TakeFromPool(pool, rounded, stream);
  if (block != nullptr) {
    ++stats_.num_cache_hits;
  } else {
    DS_ASSIGN_OR_RETURN(block, NewSegment(bytes, rounded, stream, &pool == &small_pool_));
  }
  MaybeSplit(block, rounded);
  block->allocated = true;
  block->requested = bytes;
  allocated_[block->ptr] = block;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  ++stats_.num_allocs;
  UpdatePeaks();
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::TakeFromPool(Pool& pool, size_t rounded,
                                                        StreamHandle stream) {
  Block key;
  key.stream = stream;
  key.size = rounded;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  block->cached = false;
  return block;
}

StatusOr<CachingAllocator::Block*> CachingAllocator::NewSegment(size_t bytes, size_t rounded,
                                                                StreamHandle stream, bool small) {
  const size_t segment = SegmentSize(rounded);
  StatusOr<void*> ptr = backend_->Malloc(segment);
  if (!ptr.ok() && ptr.status().code() == StatusCode::kResourceExhausted) {
    // Free what the cache holds and try once more (see the header).
    ++stats_.num_oom_retries;
    DS_RETURN_IF_ERROR(ProcessEvents());
    DS_RETURN_IF_ERROR(ReleaseCached(small_pool_));
    DS_RETURN_IF_ERROR(ReleaseCached(large_pool_));
    ptr = backend_->Malloc(segment);
  }
  if (!ptr.ok()) {
    if (ptr.status().code() != StatusCode::kResourceExhausted) return ptr.status();
    ++stats_.num_ooms;
    return ResourceExhaustedError(OomMessage(bytes, segment, stream) +
                                  " (device: " + ptr.status().message() + ")");
  }
  ++stats_.num_device_allocs;
  stats_.reserved_bytes += segment;
  UpdatePeaks();
  auto* block = new Block;
  block->ptr = *ptr;
  block->size = segment;
  block->stream = stream;
  block->small = small;
  return block;
}

std::string CachingAllocator::OomMessage(size_t bytes, size_t segment, StreamHandle stream) const {
  return "CUDA out of memory: cannot allocate " + FormatBytes(bytes) + " (" +
         std::to_string(bytes) + " bytes; device segment " + FormatBytes(segment) + ") on " +
         StreamName(stream) + "; allocated " + FormatBytes(stats_.allocated_bytes) + ", reserved " +
         FormatBytes(stats_.reserved_bytes) + ", peak allocated " +
         FormatBytes(stats_.peak_allocated_bytes) + ", peak reserved " +
         FormatBytes(stats_.peak_reserved_bytes) +
         "; the cache was emptied and the request retried";
}

void CachingAllocator::MaybeSplit(Block* block, size_t rounded) {
  const size_t rest = block->size - rounded;
  // A large-pool remainder of <= 1 MiB would only serve small requests, which have their
  // own pool: keep it attached instead (it is merged back on free).
  const bool worth = block->small ? rest >= kRound : rest > kSmallRequest;
  if (!worth) return;
  auto* tail = new Block;
  tail->ptr = static_cast<char*>(block->ptr) + rounded;
  tail->size = rest;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail;
  block->next = tail;
  block->size = rounded;
  tail->cached = true;
  (block->small ? small_pool_ : large_pool_).insert(tail);
}

Status CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%p", ptr);
    return InvalidArgumentError(std::string("CachingAllocator::Free: ") + buf +
                                " was not allocated here or was freed already");
  }
  Block* block = it->second;
  allocated_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  block->requested = 0;
  if (block->stream_uses.empty()) {
    ReturnToPool(block);
    return OkStatus();
  }
  // Other streams may still read or write it: reuse only after what they have queued so
  // far. If recording fails the block is never reused (leaked), which is safe.
  std::vector<StreamHandle> uses;
  uses.swap(block->stream_uses);
  ++stats_.pending_event_blocks;
  for (StreamHandle s : uses) {
    DS_ASSIGN_OR_RETURN(EventHandle event, GetEvent());
    Status st = backend_->RecordEvent(event, s);
    if (!st.ok()) {
      free_events_.push_back(event);
      return st;
    }
    ++block->event_count;
    pending_events_.push_back({event, block});
  }
  return OkStatus();
}

Status CachingAllocator::RecordStream(void* ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) {
    return InvalidArgumentError("CachingAllocator::RecordStream: pointer not allocated here");
  }
  Block* block = it->second;
  if (stream == block->stream) return OkStatus();  // its own stream orders it already
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  return OkStatus();
}

void CachingAllocator::ReturnToPool(Block* block) {
  Pool& pool = block->small ? small_pool_ : large_pool_;
  // Merge with free neighbours: absorb `next` into `block`, or `block` into `prev`.
  Block* next = block->next;
  if (next != nullptr && next->cached) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  Block* prev = block->prev;
  if (prev != nullptr && prev->cached) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  block->cached = true;
  pool.insert(block);
}

Status CachingAllocator::ProcessEvents() {
  // Every pending event is queried (not only up to the first incomplete one), so that a
  // slow stream does not hold back blocks used by others. The list is short: one entry per
  // (freed block, other stream) still in flight.
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    DS_ASSIGN_OR_RETURN(bool done, backend_->QueryEvent(it->event));
    if (!done) {
      ++it;
      continue;
    }
    Block* block = it->block;
    free_events_.push_back(it->event);
    it = pending_events_.erase(it);
    if (--block->event_count == 0) {
      --stats_.pending_event_blocks;
      ReturnToPool(block);
    }
  }
  return OkStatus();
}

Status CachingAllocator::ReleaseCached(Pool& pool) {
  for (auto it = pool.begin(); it != pool.end();) {
    Block* b = *it;
    if (b->prev != nullptr || b->next != nullptr) {
      ++it;
      continue;
    }
    DS_RETURN_IF_ERROR(backend_->Free(b->ptr));
    ++stats_.num_device_frees;
    stats_.reserved_bytes -= b->size;
    it = pool.erase(it);
    delete b;
  }
  return OkStatus();
}

Status CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  DS_RETURN_IF_ERROR(ProcessEvents());
  DS_RETURN_IF_ERROR(ReleaseCached(small_pool_));
  return ReleaseCached(large_pool_);
}

StatusOr<EventHandle> CachingAllocator::GetEvent() {
  if (!free_events_.empty()) {
    EventHandle e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  return backend_->CreateEvent();
}

void CachingAllocator::UpdatePeaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeakStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace ds::cuda
