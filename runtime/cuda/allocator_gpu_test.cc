// GPU test: the CachingAllocator on a real device through CudaAllocatorBackend: memory is
// usable, blocks are reused, a block used on a second stream waits for that stream, an
// impossible request is ResourceExhausted with the allocator's numbers, EmptyCache returns
// memory to the device.
//
// Needs a GPU: without one it prints "SKIPPED: no CUDA device (...)" and exits 77
// (kernels/cuda/README.md). Any other probe failure exits 1.
#include <catch2/catch.hpp>
#include <cstdio>
#include <vector>

#include "runtime/cuda/device.h"

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/cuda_allocator_backend.h"
#include "runtime/cuda/stream.h"

namespace ds::cuda {
namespace {

constexpr size_t kMiB = 1 << 20;

std::unique_ptr<CachingAllocator> NewAllocator() {
  StatusOr<std::unique_ptr<CudaAllocatorBackend>> backend = CudaAllocatorBackend::Create(0);
  REQUIRE(backend.ok());
  return std::make_unique<CachingAllocator>(std::move(*backend));
}

TEST_CASE("CachingAllocator on a GPU: memory works and is reused", "[cuda][allocator]") {
  auto alloc = NewAllocator();
  StatusOr<Stream> stream = Stream::Create();
  REQUIRE(stream.ok());
  const size_t bytes = 3 * kMiB + 100;
  StatusOr<void*> p = alloc->Allocate(bytes, stream->get());
  REQUIRE(p.ok());
  REQUIRE(cudaMemsetAsync(*p, 0x5A, bytes, stream->get()) == cudaSuccess);
  std::vector<unsigned char> host(bytes);
  REQUIRE(cudaMemcpyAsync(host.data(), *p, bytes, cudaMemcpyDeviceToHost, stream->get()) ==
          cudaSuccess);
  REQUIRE(stream->Synchronize().ok());
  CHECK(host.front() == 0x5A);
  CHECK(host.back() == 0x5A);
  REQUIRE(alloc->Free(*p).ok());

  StatusOr<void*> q = alloc->Allocate(bytes, stream->get());
  REQUIRE(q.ok());
  CHECK(*q == *p);
  AllocatorStats st = alloc->stats();
  CHECK(st.num_device_allocs == 1);
  CHECK(st.num_cache_hits == 1);
  CHECK(st.reserved_bytes == 4 * kMiB);
  REQUIRE(alloc->Free(*q).ok());
  REQUIRE(alloc->EmptyCache().ok());
  CHECK(alloc->stats().reserved_bytes == 0);
}

TEST_CASE("CachingAllocator on a GPU: cross-stream use defers reuse", "[cuda][allocator]") {
  auto alloc = NewAllocator();
  StatusOr<Stream> s1 = Stream::Create();
  StatusOr<Stream> s2 = Stream::Create();
  REQUIRE((s1.ok() && s2.ok()));
  StatusOr<void*> p = alloc->Allocate(8 * kMiB, s1->get());
  REQUIRE(p.ok());
  // Keep stream 2 busy with the block: many large memsets.
  for (int i = 0; i < 200; ++i) {
    REQUIRE(cudaMemsetAsync(*p, i, 8 * kMiB, s2->get()) == cudaSuccess);
  }
  REQUIRE(alloc->RecordStream(*p, s2->get()).ok());
  REQUIRE(alloc->Free(*p).ok());
  StatusOr<void*> q = alloc->Allocate(8 * kMiB, s1->get());
  REQUIRE(q.ok());
  if (alloc->stats().pending_event_blocks == 1) CHECK(*q != *p);  // stream 2 still running
  REQUIRE(s2->Synchronize().ok());
  REQUIRE(alloc->Free(*q).ok());
  StatusOr<void*> r = alloc->Allocate(8 * kMiB, s1->get());  // processes the event
  REQUIRE(r.ok());
  CHECK(alloc->stats().pending_event_blocks == 0);
  REQUIRE(alloc->Free(*r).ok());
}

TEST_CASE("CachingAllocator on a GPU: out of memory is ResourceExhausted", "[cuda][allocator]") {
  auto alloc = NewAllocator();
  StatusOr<void*> cached = alloc->Allocate(64 * kMiB, nullptr);
  REQUIRE(cached.ok());
  REQUIRE(alloc->Free(*cached).ok());
  const size_t huge = size_t{1} << 50;  // 1 PiB
  StatusOr<void*> p = alloc->Allocate(huge, nullptr);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(p.status().message(), Catch::Contains("1.00 PiB"));
  CHECK_THAT(p.status().message(), Catch::Contains("default stream"));
  AllocatorStats st = alloc->stats();
  CHECK(st.num_oom_retries == 1);
  CHECK(st.reserved_bytes == 0);             // the retry released the cached 64 MiB
  CHECK(cudaGetLastError() == cudaSuccess);  // the OOM did not linger
  StatusOr<void*> after = alloc->Allocate(kMiB, nullptr);
  REQUIRE(after.ok());
  REQUIRE(alloc->Free(*after).ok());
}

}  // namespace
}  // namespace ds::cuda
#endif  // DS_HAVE_CUDA
