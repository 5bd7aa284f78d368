#include "zero/aio/io_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "zero/aio/aligned_buffer.h"
#include "zero/aio/nvme_path.h"

namespace ds::zero {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void Fill(void* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto* b = static_cast<unsigned char*>(p);
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(rng());
}

// The file's bytes, read without the engine.
std::vector<char> Slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  std::vector<char> out;
  char chunk[65536];
  ssize_t n;
  while ((n = ::read(fd, chunk, sizeof(chunk))) > 0) out.insert(out.end(), chunk, chunk + n);
  ::close(fd);
  return out;
}

// Writes n random bytes at offset 0, trims the padding, and reads them back.
void RoundTrip(IoEngine& e, int64_t n, bool direct, uint32_t seed) {
  const std::string path = TempPath("rt.bin");
  auto src = AlignedBuffer::Allocate(n);
  auto dst = AlignedBuffer::Allocate(n);
  REQUIRE(src.ok());
  REQUIRE(dst.ok());
  Fill(src->data(), n, seed);
  {
    auto f = IoFile::Open(path, IoFile::kCreate, direct);
    REQUIRE(f.ok());
    CHECK(f->direct() == direct);
    auto t = e.Write(*f, 0, src->data(), n);
    REQUIRE(t.ok());
    REQUIRE(e.Wait(*t).ok());
    REQUIRE(f->Truncate(n).ok());
  }
  const std::vector<char> on_disk = Slurp(path);
  REQUIRE(static_cast<int64_t>(on_disk.size()) == n);
  CHECK(std::memcmp(on_disk.data(), src->data(), n) == 0);
  auto f = IoFile::Open(path, IoFile::kRead, direct);
  REQUIRE(f.ok());
  auto t = e.Read(*f, 0, dst->data(), n);
  REQUIRE(t.ok());
  Status s = e.Wait(*t);
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(std::memcmp(dst->data(), src->data(), n) == 0);
}

TEST_CASE("aio: byte-exact round trips over every option combination", "[aio]") {
  int cases = 0;
  for (int64_t block : {int64_t{4096}, int64_t{65536}})
    for (int qd : {1, 8, 32})
      for (int par : {1, 2, 4})
        for (bool single : {false, true})
          for (bool overlap : {true, false}) {
            IoOptions o{block, qd, par, single, overlap};
            auto e = IoEngine::Create(o);
            REQUIRE(e.ok());
            for (int64_t n :
                 {int64_t{1}, int64_t{4097}, int64_t{3 * 65536 + 17}, int64_t{1 << 20}}) {
              INFO("block " << block << " qd " << qd << " par " << par << " single " << single
                            << " overlap " << overlap << " bytes " << n);
              RoundTrip(**e, n, true, static_cast<uint32_t>(n + qd));
              ++cases;
            }
          }
  CHECK(cases == 288);
}

TEST_CASE("aio: many requests outstanding at once land where they belong", "[aio]") {
  auto e = IoEngine::Create(IoOptions{8192, 4, 2, false, true});
  REQUIRE(e.ok());
  constexpr int kRequests = 64;
  constexpr int64_t kEach = 3 * 8192 + 4096;  // aligned regions, several pieces each
  auto src = AlignedBuffer::Allocate(kRequests * kEach);
  auto dst = AlignedBuffer::Allocate(kRequests * kEach);
  REQUIRE(src.ok());
  REQUIRE(dst.ok());
  Fill(src->data(), kRequests * kEach, 7);
  auto f = IoFile::Open(TempPath("many.bin"), IoFile::kCreate);
  REQUIRE(f.ok());
  std::vector<IoTicket> tickets;
  auto* s = static_cast<char*>(src->data());
  for (int i = kRequests - 1; i >= 0; --i) {  // issued out of file order
    auto t = (*e)->Write(*f, i * kEach, s + i * kEach, kEach);
    REQUIRE(t.ok());
    tickets.push_back(*t);
  }
  for (IoTicket& t : tickets) REQUIRE((*e)->Wait(t).ok());
  tickets.clear();
  auto* d = static_cast<char*>(dst->data());
  for (int i = 0; i < kRequests; ++i) {
    auto t = (*e)->Read(*f, i * kEach, d + i * kEach, kEach);
    REQUIRE(t.ok());
    tickets.push_back(*t);
  }
  for (IoTicket& t : tickets) REQUIRE((*e)->Wait(t).ok());
  CHECK(std::memcmp(d, s, kRequests * kEach) == 0);
}

TEST_CASE("aio: a buffered file takes any offset and buffer, and moves exactly the bytes",
          "[aio]") {
  auto e = IoEngine::Create(IoOptions{4096, 4, 2, false, true});
  REQUIRE(e.ok());
  RoundTrip(**e, 10007, false, 3);
  std::vector<char> src(9000), dst(9000);
  Fill(src.data(), 9000, 5);
  auto f = IoFile::Open(TempPath("buffered.bin"), IoFile::kCreate, false);
  REQUIRE(f.ok());
  auto t = (*e)->Write(*f, 123, src.data() + 1, 8999);
  REQUIRE(t.ok());
  REQUIRE((*e)->Wait(*t).ok());
  CHECK(*f->Size() == 123 + 8999);
  auto r = (*e)->Read(*f, 123, dst.data() + 1, 8999);
  REQUIRE(r.ok());
  REQUIRE((*e)->Wait(*r).ok());
  CHECK(std::memcmp(src.data() + 1, dst.data() + 1, 8999) == 0);
}

TEST_CASE("aio: bad requests and options are refused, reads past the end are DataLoss", "[aio]") {
  CHECK(CheckIoOptions(IoOptions{1000}).message().find("aio.block_size") != std::string::npos);
  CHECK(CheckIoOptions(IoOptions{4096, 0}).message().find("aio.queue_depth") != std::string::npos);
  CHECK(CheckIoOptions(IoOptions{4096, 8, 0}).message().find("aio.intra_op_parallelism") !=
        std::string::npos);
  auto e = IoEngine::Create(IoOptions{4096, 8, 1});
  REQUIRE(e.ok());
  auto buf = AlignedBuffer::Allocate(3 * 4096);
  REQUIRE(buf.ok());
  auto f = IoFile::Open(TempPath("bad.bin"), IoFile::kCreate);
  REQUIRE(f.ok());
  REQUIRE(f->direct());  // the test directory's filesystem takes O_DIRECT
  auto* p = static_cast<char*>(buf->data());
  auto mis = (*e)->Write(*f, 100, p, 4096);
  CHECK(mis.status().code() == StatusCode::kInvalidArgument);
  CHECK((*e)->Write(*f, 0, p + 1, 4096).status().code() == StatusCode::kInvalidArgument);
  auto w = (*e)->Write(*f, 0, p, 5000);
  REQUIRE(w.ok());
  REQUIRE((*e)->Wait(*w).ok());
  REQUIRE(f->Truncate(5000).ok());
  auto r = (*e)->Read(*f, 0, p, 3 * 4096);  // wants 12288 bytes of a 5000-byte file
  REQUIRE(r.ok());
  Status s = (*e)->Wait(*r);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("bad.bin") != std::string::npos);
  auto missing = IoFile::Open(TempPath("no/such/dir/x.bin"), IoFile::kRead);
  CHECK_FALSE(missing.ok());
  CHECK(missing.status().message().find("no/such/dir/x.bin") != std::string::npos);
}

TEST_CASE("aio: a swap directory is checked before any step, naming the key", "[aio]") {
  const std::string key = "zero_optimization.offload_optimizer.nvme_path";
  CHECK(CheckSwapDir(key, TempPath("")).ok());
  Status missing = CheckSwapDir(key, TempPath("no_such_dir"));
  CHECK(missing.code() == StatusCode::kNotFound);
  CHECK(missing.message().find(key + " ") == 0);
  CHECK(missing.message().find("no_such_dir") != std::string::npos);
  auto f = IoFile::Open(TempPath("plain_file"), IoFile::kCreate);
  REQUIRE(f.ok());
  CHECK(CheckSwapDir(key, TempPath("plain_file")).code() == StatusCode::kFailedPrecondition);
  // Not writable even for root: procfs takes no new files.
  Status ro = CheckSwapDir(key, "/proc/self");
  CHECK(ro.code() == StatusCode::kPermissionDenied);
  CHECK(ro.message().find("/proc/self") != std::string::npos);
}

}  // namespace
}  // namespace ds::zero
