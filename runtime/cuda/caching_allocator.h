// CachingAllocator: a device memory allocator that keeps freed blocks for reuse, so the step
// loop does not pay cudaMalloc/cudaFree (which synchronizes the device) for every tensor.
//
// Policy (see README.md, "Caching allocator"):
// - Requests are rounded up to 512 B. Requests of at most 1 MiB come from the small pool,
//   carved out of 2 MiB segments; larger ones from the large pool, whose segments are the
//   request rounded up to 2 MiB.
// - Free blocks are cached per stream, ordered by size: an allocation takes the smallest
//   cached block of its pool and stream that fits (best fit), splitting off the rest when the
//   rest is large enough to be useful (any rest in the small pool; > 1 MiB in the large one).
//   A freed block merges with free neighbours of the same segment.
// - A block is tied to the stream it was allocated on. If another stream uses it, tell the
//   allocator (RecordStream); when the block is freed, an event is recorded on each such
//   stream and the block returns to the pool only once all those events completed.
// - When the device is out of memory: completed events are processed, every cached segment
//   that is entirely free is released, and the device allocation is retried once; if it
//   fails again the result is ResourceExhausted naming the request, the stream and the
//   allocator's statistics.
//
// The device is reached only through AllocatorBackend (malloc, free, events), so the policy
// runs on the CPU in tests with a fake backend; the CUDA backend is in
// cuda_allocator_backend.h. Thread-safe: every method takes one mutex (backend calls are
// made under it). Streams and events are opaque handles (cudaStream_t / cudaEvent_t for the
// CUDA backend); this header includes no CUDA headers.
//
//   DS_ASSIGN_OR_RETURN(auto backend, cuda::CudaAllocatorBackend::Create(/*device=*/0));
//   cuda::CachingAllocator alloc(std::move(backend));
//   DS_ASSIGN_OR_RETURN(void* p, alloc.Allocate(bytes, stream));
//   ...
//   DS_RETURN_IF_ERROR(alloc.Free(p));
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::cuda {

using StreamHandle = void*;  // cudaStream_t for the CUDA backend; nullptr = default stream
using EventHandle = void*;   // cudaEvent_t for the CUDA backend

// What the allocator needs from a device. Called with the allocator's mutex held, never
// concurrently.
class AllocatorBackend {
 public:
  virtual ~AllocatorBackend() = default;
  // `bytes` of device memory. ResourceExhausted when the device is out of memory; other
  // errors are passed on unchanged (the allocator does not retry them).
  virtual StatusOr<void*> Malloc(size_t bytes) = 0;
  virtual Status Free(void* ptr) = 0;
  virtual StatusOr<EventHandle> CreateEvent() = 0;
  virtual void DestroyEvent(EventHandle event) = 0;
  // Captures the work queued on `stream` so far.
  virtual Status RecordEvent(EventHandle event, StreamHandle stream) = 0;
  // True once the captured work finished; never blocks.
  virtual StatusOr<bool> QueryEvent(EventHandle event) = 0;
};

struct AllocatorStats {
  size_t allocated_bytes = 0;        // in blocks handed out (rounded sizes)
  size_t reserved_bytes = 0;         // in device segments (allocated + cached)
  size_t peak_allocated_bytes = 0;   // max of allocated_bytes since construction / ResetPeaks
  size_t peak_reserved_bytes = 0;    // max of reserved_bytes
  size_t requested_bytes = 0;        // sum of the sizes asked for, before rounding
  int64_t num_allocs = 0;            // successful Allocate calls with bytes > 0
  int64_t num_cache_hits = 0;        // of those, served from the cache (no device malloc)
  int64_t num_device_allocs = 0;     // backend Malloc calls that succeeded
  int64_t num_device_frees = 0;      // backend Free calls
  int64_t num_oom_retries = 0;       // device OOMs answered by freeing the cache and retrying
  int64_t num_ooms = 0;              // requests that failed with ResourceExhausted
  int64_t pending_event_blocks = 0;  // freed blocks still waiting for other streams' events
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;             // every size is a multiple of this
  static constexpr size_t kSmallRequest = 1 << 20;  // <= this: the small pool
  static constexpr size_t kSmallSegment = 2 << 20;  // segment size of the small pool
  static constexpr size_t kLargeRound = 2 << 20;    // large segments: multiples of this

  explicit CachingAllocator(std::unique_ptr<AllocatorBackend> backend);
  // Releases every segment and event. Blocks still allocated are leaked to the device (their
  // owners may still use them) and logged.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream` (the stream whose order the caller
  // follows). bytes == 0 gives nullptr. ResourceExhausted when the device cannot provide it
  // even after the cache was released; other backend errors as they are.
  StatusOr<void*> Allocate(size_t bytes, StreamHandle stream);
  // Returns a block from Allocate to the cache (nullptr is ignored). If RecordStream named
  // other streams, the block is reused only after the work queued on them by now finished.
  // InvalidArgument for a pointer this allocator did not hand out (or freed twice).
  Status Free(void* ptr);
  // Declares that `ptr` (from Allocate, not yet freed) is also used by work on `stream`.
  Status RecordStream(void* ptr, StreamHandle stream);
  // Releases every cached segment that is entirely free, after processing completed events.
  // Blocks still waiting for events stay.
  Status EmptyCache();

  AllocatorStats stats() const;
  // Peaks restart from the current values.
  void ResetPeakStats();
  // Rounded size of a request, as Allocate sees it (512 B multiples; 0 stays 0).
  static size_t RoundSize(size_t bytes);
  // Device segment size Allocate asks the backend for when `rounded` does not fit the cache.
  static size_t SegmentSize(size_t rounded);

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;
  struct PendingEvent {
    EventHandle event;
    Block* block;
  };

  Pool& PoolFor(size_t rounded) { return rounded <= kSmallRequest ? small_pool_ : large_pool_; }
  // The best-fit cached block, removed from its pool, or nullptr.
  Block* TakeFromPool(Pool& pool, size_t rounded, StreamHandle stream);
  // A new segment from the backend, with one OOM retry after releasing the cache.
  StatusOr<Block*> NewSegment(size_t bytes, size_t rounded, StreamHandle stream, bool small);
  // Splits `block` (not in a pool) so that it is `rounded` long, if the rest is worth keeping.
  void MaybeSplit(Block* block, size_t rounded);
  // Marks a block free, merges it with free neighbours and puts the result in its pool.
  void ReturnToPool(Block* block);
  Status ProcessEvents();
  // Releases the free, whole segments of `pool`.
  Status ReleaseCached(Pool& pool);
  StatusOr<EventHandle> GetEvent();
  std::string OomMessage(size_t bytes, size_t segment, StreamHandle stream) const;
  void UpdatePeaks();

  const std::unique_ptr<AllocatorBackend> backend_;

  mutable std::mutex mu_;
  Pool small_pool_;                              // guarded by mu_
  Pool large_pool_;                              // guarded by mu_
  std::unordered_map<void*, Block*> allocated_;  // guarded by mu_; handed-out blocks
  std::list<PendingEvent> pending_events_;       // guarded by mu_; in record order
  std::vector<EventHandle> free_events_;         // guarded by mu_; for reuse
  AllocatorStats stats_;                         // guarded by mu_
};

// "1.50 GiB", "512 B": for messages.
std::string FormatBytes(size_t bytes);

}  // namespace ds::cuda
