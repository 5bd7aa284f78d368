// The CachingAllocator policy on the CPU: a fake backend hands out host memory up to a byte
// cap (beyond it: ResourceExhausted, as cudaMalloc's out-of-memory) and its events complete
// only when the test finishes the stream they were recorded on.
#include "runtime/cuda/caching_allocator.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

namespace ds::cuda {
namespace {

constexpr size_t kMiB = 1 << 20;

class FakeBackend final : public AllocatorBackend {
 public:
  // Counters the test reads after handing the backend to the allocator.
  struct Shared {
    size_t cap = 0;
    size_t in_use = 0;
    int mallocs = 0;
    int frees = 0;
    int failed_mallocs = 0;
    std::map<void*, size_t> live;
    // event id -> (stream it was recorded on, completed)
    std::map<intptr_t, std::pair<StreamHandle, bool>> events;
    intptr_t next_event = 1;
    bool fail_queries = false;
  };

  explicit FakeBackend(Shared* shared) : s_(shared) {}

  StatusOr<void*> Malloc(size_t bytes) override {
    if (s_->in_use + bytes > s_->cap) {
      ++s_->failed_mallocs;
      return ResourceExhaustedError("fake device: out of memory");
    }
    void* p = std::malloc(bytes);
    std::memset(p, 0xAB, bytes);  // the allocator must never write to device memory
    s_->in_use += bytes;
    s_->live[p] = bytes;
    ++s_->mallocs;
    return p;
  }
  Status Free(void* ptr) override {
    auto it = s_->live.find(ptr);
    if (it == s_->live.end()) return InternalError("fake device: free of unknown pointer");
    s_->in_use -= it->second;
    s_->live.erase(it);
    std::free(ptr);
    ++s_->frees;
    return OkStatus();
  }
  StatusOr<EventHandle> CreateEvent() override {
    const intptr_t id = s_->next_event++;
    s_->events[id] = {nullptr, true};
    return reinterpret_cast<EventHandle>(id);
  }
  void DestroyEvent(EventHandle event) override {
    s_->events.erase(reinterpret_cast<intptr_t>(event));
  }
  Status RecordEvent(EventHandle event, StreamHandle stream) override {
    s_->events.at(reinterpret_cast<intptr_t>(event)) = {stream, false};
    return OkStatus();
  }
  StatusOr<bool> QueryEvent(EventHandle event) override {
    if (s_->fail_queries) return InternalError("fake device: event query failed");
    return s_->events.at(reinterpret_cast<intptr_t>(event)).second;
  }

 private:
  Shared* const s_;
};

// Completes every event recorded on `stream` so far.
void FinishStream(FakeBackend::Shared& s, StreamHandle stream) {
  for (auto& [id, e] : s.events) {
    if (e.first == stream) e.second = true;
  }
}

StreamHandle Stream(intptr_t id) { return reinterpret_cast<StreamHandle>(id); }

struct Fixture {
  explicit Fixture(size_t cap) {
    shared.cap = cap;
    alloc = std::make_unique<CachingAllocator>(std::make_unique<FakeBackend>(&shared));
  }
  FakeBackend::Shared shared;
  std::unique_ptr<CachingAllocator> alloc;
};

void* MustAllocate(CachingAllocator& a, size_t bytes, StreamHandle s) {
  StatusOr<void*> p = a.Allocate(bytes, s);
  REQUIRE(p.ok());
  return *p;
}

TEST_CASE("CachingAllocator: rounding and segment sizes", "[cuda][allocator]") {
  CHECK(CachingAllocator::RoundSize(0) == 0);
  CHECK(CachingAllocator::RoundSize(1) == 512);
  CHECK(CachingAllocator::RoundSize(512) == 512);
  CHECK(CachingAllocator::RoundSize(513) == 1024);
  CHECK(CachingAllocator::SegmentSize(512) == 2 * kMiB);
  CHECK(CachingAllocator::SegmentSize(kMiB) == 2 * kMiB);  // still small
  CHECK(CachingAllocator::SegmentSize(kMiB + 512) == 2 * kMiB);
  CHECK(CachingAllocator::SegmentSize(2 * kMiB + 512) == 4 * kMiB);
  CHECK(CachingAllocator::SegmentSize(7 * kMiB) == 8 * kMiB);
  CHECK(FormatBytes(512) == "512 B");
  CHECK(FormatBytes(3 * kMiB / 2) == "1.50 MiB");
}

TEST_CASE("CachingAllocator: small blocks share one 2 MiB segment and are reused",
          "[cuda][allocator]") {
  Fixture f(64 * kMiB);
  CachingAllocator& a = *f.alloc;
  void* p1 = MustAllocate(a, 100, Stream(1));
  void* p2 = MustAllocate(a, 1000, Stream(1));
  CHECK(f.shared.mallocs == 1);
  CHECK(static_cast<char*>(p2) == static_cast<char*>(p1) + 512);  // split, in address order
  AllocatorStats st = a.stats();
  CHECK(st.allocated_bytes == 512 + 1024);
  CHECK(st.requested_bytes == 1100);
  CHECK(st.reserved_bytes == 2 * kMiB);
  CHECK(st.num_device_allocs == 1);
  CHECK(st.num_cache_hits == 1);  // p2 came from p1's segment remainder

  REQUIRE(a.Free(p1).ok());
  void* p3 = MustAllocate(a, 200, Stream(1));
  CHECK(p3 == p1);  // best fit: the freed 512 B block, not the big remainder
  CHECK(f.shared.mallocs == 1);

  SECTION("zero bytes is nullptr, freeing nullptr is fine") {
    StatusOr<void*> z = a.Allocate(0, Stream(1));
    REQUIRE(z.ok());
    CHECK(*z == nullptr);
    CHECK(a.Free(nullptr).ok());
  }
  SECTION("double free and foreign pointers are InvalidArgument") {
    REQUIRE(a.Free(p2).ok());
    CHECK(a.Free(p2).code() == StatusCode::kInvalidArgument);
    int local = 0;
    CHECK(a.Free(&local).code() == StatusCode::kInvalidArgument);
    CHECK(a.RecordStream(&local, Stream(2)).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("CachingAllocator: free neighbours merge back into the whole segment",
          "[cuda][allocator]") {
  Fixture f(64 * kMiB);
  CachingAllocator& a = *f.alloc;
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(MustAllocate(a, 512 * 1024, Stream(1)));  // 4 x 512K
  CHECK(f.shared.mallocs == 1);
  // Free in an order that exercises merging with next, with prev, and with both.
  REQUIRE(a.Free(ps[1]).ok());
  REQUIRE(a.Free(ps[3]).ok());
  REQUIRE(a.Free(ps[2]).ok());  // merges with both neighbours: [1..3] free
  REQUIRE(a.Free(ps[0]).ok());  // the whole segment
  // A 1 MiB request now fits in the merged block (no new segment) ...
  void* big = MustAllocate(a, kMiB, Stream(1));
  CHECK(big == ps[0]);
  CHECK(f.shared.mallocs == 1);
  REQUIRE(a.Free(big).ok());
  // ... and EmptyCache can release it, because it is one whole free segment again.
  REQUIRE(a.EmptyCache().ok());
  CHECK(f.shared.in_use == 0);
  CHECK(a.stats().reserved_bytes == 0);
  CHECK(a.stats().num_device_frees == 1);
}

TEST_CASE("CachingAllocator: large blocks round to 2 MiB segments and split only big rests",
          "[cuda][allocator]") {
  Fixture f(256 * kMiB);
  CachingAllocator& a = *f.alloc;
  void* p = MustAllocate(a, 5 * kMiB + 1, Stream(1));  // rounds to 5 MiB + 512, segment 6 MiB
  CHECK(f.shared.live.at(p) == 6 * kMiB);
  // The rest (1 MiB - 512) is too small to split off in the large pool: the block keeps it.
  CHECK(a.stats().allocated_bytes == 6 * kMiB);
  REQUIRE(a.Free(p).ok());

  void* q = MustAllocate(a, 2 * kMiB, Stream(1));  // fits in the cached 6 MiB: split
  CHECK(q == p);
  CHECK(f.shared.mallocs == 1);
  CHECK(a.stats().allocated_bytes == 2 * kMiB);
  void* r = MustAllocate(a, 3 * kMiB, Stream(1));  // the 4 MiB remainder, split again
  CHECK(r == static_cast<char*>(p) + 2 * kMiB);
  CHECK(f.shared.mallocs == 1);
  // Small requests never come out of large segments.
  void* s = MustAllocate(a, 4096, Stream(1));
  CHECK(f.shared.mallocs == 2);
  CHECK(f.shared.live.count(s) == 1);
  for (void* x : {q, r, s}) REQUIRE(a.Free(x).ok());
  REQUIRE(a.EmptyCache().ok());
  CHECK(f.shared.in_use == 0);
}

TEST_CASE("CachingAllocator: cached blocks belong to their stream", "[cuda][allocator]") {
  Fixture f(64 * kMiB);
  CachingAllocator& a = *f.alloc;
  void* p = MustAllocate(a, 4 * kMiB, Stream(1));
  REQUIRE(a.Free(p).ok());
  void* q = MustAllocate(a, 4 * kMiB, Stream(2));  // stream 1's cache is not for stream 2
  CHECK(q != p);
  CHECK(f.shared.mallocs == 2);
  void* r = MustAllocate(a, 4 * kMiB, Stream(1));
  CHECK(r == p);
  CHECK(a.stats().num_cache_hits == 1);
  REQUIRE(a.Free(q).ok());
  REQUIRE(a.Free(r).ok());
}

TEST_CASE("CachingAllocator: a block used by another stream waits for its events",
          "[cuda][allocator]") {
  Fixture f(64 * kMiB);
  CachingAllocator& a = *f.alloc;
  void* p = MustAllocate(a, 4 * kMiB, Stream(1));
  REQUIRE(a.RecordStream(p, Stream(2)).ok());
  REQUIRE(a.RecordStream(p, Stream(3)).ok());
  REQUIRE(a.RecordStream(p, Stream(2)).ok());  // once per stream
  REQUIRE(a.RecordStream(p, Stream(1)).ok());  // its own stream: nothing to do
  REQUIRE(a.Free(p).ok());
  CHECK(a.stats().pending_event_blocks == 1);
  CHECK(a.stats().allocated_bytes == 0);

  // Streams 2 and 3 may still use it: a new request gets new memory.
  void* q = MustAllocate(a, 4 * kMiB, Stream(1));
  CHECK(q != p);
  REQUIRE(a.Free(q).ok());
  FinishStream(f.shared, Stream(2));
  void* r = MustAllocate(a, 4 * kMiB, Stream(1));  // q comes back, p still waits on stream 3
  CHECK(r == q);
  CHECK(a.stats().pending_event_blocks == 1);
  FinishStream(f.shared, Stream(3));
  void* s = MustAllocate(a, 4 * kMiB, Stream(1));
  CHECK(s == p);
  CHECK(a.stats().pending_event_blocks == 0);
  CHECK(f.shared.mallocs == 2);

  SECTION("events are reused") {
    const size_t events = f.shared.events.size();
    REQUIRE(a.RecordStream(s, Stream(2)).ok());
    REQUIRE(a.Free(s).ok());
    CHECK(f.shared.events.size() == events);
  }
  SECTION("an event query error is returned") {
    REQUIRE(a.RecordStream(s, Stream(2)).ok());
    REQUIRE(a.Free(s).ok());
    f.shared.fail_queries = true;
    StatusOr<void*> t = a.Allocate(512, Stream(1));
    CHECK(t.status().code() == StatusCode::kInternal);
    f.shared.fail_queries = false;
  }
  REQUIRE(a.Free(r).ok());
}

TEST_CASE("CachingAllocator: out of memory frees the cache and retries once", "[cuda][allocator]") {
  Fixture f(10 * kMiB);
  CachingAllocator& a = *f.alloc;
  void* p = MustAllocate(a, 6 * kMiB, Stream(1));
  void* small = MustAllocate(a, 1000, Stream(1));
  REQUIRE(a.Free(p).ok());  // 6 MiB cached, 8 MiB reserved
  CHECK(a.stats().reserved_bytes == 8 * kMiB);

  // 8 MiB does not fit next to the cached 6 MiB + 2 MiB small segment: the cached 6 MiB
  // segment is released and the retry succeeds.
  void* q = MustAllocate(a, 8 * kMiB, Stream(2));
  CHECK(f.shared.failed_mallocs == 1);
  AllocatorStats st = a.stats();
  CHECK(st.num_oom_retries == 1);
  CHECK(st.num_ooms == 0);
  CHECK(st.reserved_bytes == 10 * kMiB);
  CHECK(st.peak_reserved_bytes == 10 * kMiB);
  CHECK(st.peak_allocated_bytes == 8 * kMiB + 1024);

  // Nothing left to free: ResourceExhausted naming the request, the stream and the stats.
  StatusOr<void*> r = a.Allocate(3 * kMiB, Stream(2));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  const std::string msg = r.status().message();
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("cannot allocate 3.00 MiB (3145728 bytes"));
  CHECK_THAT(msg, Catch::Contains("stream 0x2"));
  CHECK_THAT(msg, Catch::Contains("allocated 8.00 MiB"));
  CHECK_THAT(msg, Catch::Contains("reserved 10.00 MiB"));
  CHECK_THAT(msg, Catch::Contains("peak allocated 8.00 MiB"));
  CHECK_THAT(msg, Catch::Contains("fake device: out of memory"));
  CHECK(a.stats().num_ooms == 1);
  CHECK(f.shared.failed_mallocs == 3);  // the first try and exactly one retry

  SECTION("the default stream is named as such") {
    StatusOr<void*> d = a.Allocate(3 * kMiB, nullptr);
    CHECK_THAT(d.status().message(), Catch::Contains("on the default stream"));
  }
  SECTION("blocks waiting for events are not released by the retry") {
    REQUIRE(a.RecordStream(q, Stream(3)).ok());
    REQUIRE(a.Free(q).ok());
    StatusOr<void*> w = a.Allocate(8 * kMiB, Stream(2));
    CHECK(w.status().code() == StatusCode::kResourceExhausted);
    FinishStream(f.shared, Stream(3));
    w = a.Allocate(8 * kMiB, Stream(2));
    REQUIRE(w.ok());
    CHECK(*w == q);
    REQUIRE(a.Free(*w).ok());
  }
  REQUIRE(a.Free(small).ok());
  a.ResetPeakStats();
  CHECK(a.stats().peak_allocated_bytes == a.stats().allocated_bytes);
}

TEST_CASE("CachingAllocator: destruction returns cached segments to the device",
          "[cuda][allocator]") {
  FakeBackend::Shared shared;
  shared.cap = 64 * kMiB;
  {
    CachingAllocator a(std::make_unique<FakeBackend>(&shared));
    void* p = MustAllocate(a, 3 * kMiB, Stream(1));
    void* q = MustAllocate(a, 100, Stream(1));
    REQUIRE(a.Free(p).ok());
    REQUIRE(a.Free(q).ok());
    CHECK(shared.in_use == 6 * kMiB);
  }
  CHECK(shared.in_use == 0);
  CHECK(shared.events.empty());
}

TEST_CASE("CachingAllocator: concurrent allocations from several threads", "[cuda][allocator]") {
  Fixture f(1024 * kMiB);
  CachingAllocator& a = *f.alloc;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 500; ++i) {
        // Mostly small-pool sizes, every 50th a large block.
        const size_t bytes = i % 50 == 0 ? 3 * kMiB + 512 * i : 512 * (1 + (i * 7 + t) % 600);
        StatusOr<void*> p = a.Allocate(bytes, Stream(1 + t % 2));
        if (!p.ok()) {
          ++failures;
          continue;
        }
        mine.push_back(*p);
        if (i % 3 == 0) {
          if (!a.Free(mine.front()).ok()) ++failures;
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) {
        if (!a.Free(p).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  AllocatorStats st = a.stats();
  CHECK(st.allocated_bytes == 0);
  CHECK(st.requested_bytes == 0);
  CHECK(st.num_allocs == 2000);
  REQUIRE(a.EmptyCache().ok());
  CHECK(f.shared.in_use == 0);  // every segment merged back whole
}

}  // namespace
}  // namespace ds::cuda
