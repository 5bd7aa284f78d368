#include <cstring>

#include <catch2/catch.hpp>

#include "runtime/core/tensor.h"

namespace ds {
namespace {

// A sparse buffer costs no memory until touched, and Release hands pages back: the basis of
// ZeRO-3's flat parameters and ZeRO-2's flat gradients.
TEST_CASE("Buffer: sparse pages are committed on touch and handed back by Release", "[core]") {
  const size_t mib = 1 << 20;
  Buffer b = Buffer::AllocateSparse(8 * mib + 100);
  REQUIRE(b.sparse());
  CHECK(b.ResidentBytes() == 0);
  char* p = static_cast<char*>(b.data());
  std::memset(p, 1, 8 * mib + 100);
  CHECK(b.ResidentBytes() == 8 * mib + 100);
  // Release 3 MiB starting mid-page: the whole pages inside go, the edges are zeroed.
  b.Release(mib + 10, 3 * mib, /*zero_edges=*/true);
  CHECK(b.ResidentBytes() <= 5 * mib + 100 + 2 * 4096);
  CHECK(b.ResidentBytes() >= 5 * mib);
  CHECK(p[mib + 9] == 1);
  CHECK(p[mib + 10] == 0);
  CHECK(p[2 * mib] == 0);
  CHECK(p[4 * mib + 9] == 0);
  CHECK(p[4 * mib + 10] == 1);
  // Released memory is usable again.
  p[2 * mib] = 7;
  CHECK(p[2 * mib] == 7);
  // Without zero_edges the partial pages keep their bytes.
  b.Release(4 * mib + 10, 100, /*zero_edges=*/false);
  CHECK(p[4 * mib + 10] == 1);
}

TEST_CASE("Buffer: dense buffers are zero-filled, Release zeroes, moves transfer ownership",
          "[core]") {
  Buffer b = Buffer::Allocate(1000);
  CHECK_FALSE(b.sparse());
  char* p = static_cast<char*>(b.data());
  for (int i = 0; i < 1000; ++i) REQUIRE(p[i] == 0);
  std::memset(p, 3, 1000);
  b.Release(10, 20, /*zero_edges=*/false);
  CHECK(p[9] == 3);
  CHECK(p[10] == 0);
  CHECK(p[29] == 0);
  CHECK(p[30] == 3);
  Buffer s = Buffer::AllocateSparse(5000);
  Buffer moved = std::move(s);
  CHECK(moved.sparse());
  CHECK(s.data() == nullptr);
  moved = std::move(b);
  CHECK_FALSE(moved.sparse());
  CHECK(moved.size() == 1000);
}

}  // namespace
}  // namespace ds
