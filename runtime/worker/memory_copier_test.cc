// MemoryCopier: the local copy written between steps, then sent to every remote target in order
// from a thread, one copy in flight (the next Copy waits), a failed send counted and not fatal.
#include "runtime/worker/memory_copier.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/base/status_macros.h"

namespace ds::worker {
namespace {

using namespace std::chrono_literals;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Received {
  std::mutex mu;
  std::vector<std::string> log;  // "target:step:bytes"
};

CopyTarget Recorder(const std::string& name, Received* r, std::chrono::milliseconds delay,
                    bool fail = false) {
  return {name, [=](int64_t step, const std::string& path) -> Status {
            std::this_thread::sleep_for(delay);
            std::lock_guard<std::mutex> lock(r->mu);
            r->log.push_back(name + ":" + std::to_string(step) + ":" + Slurp(path));
            return fail ? UnavailableError(name + " is gone") : OkStatus();
          }};
}

// A local "copy directory": one file per step under TEST_TMPDIR.
CopySinks Sinks(std::vector<CopyTarget> remote) {
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string dir = d ? d : "/tmp";
  CopySinks s;
  s.keep_local = [dir](int64_t step, const CopyFill& fill) -> StatusOr<std::string> {
    const std::string path = dir + "/copy." + std::to_string(step);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return InternalError("open " + path);
    uint32_t crc = 0;
    Status st = fill(fd, &crc);
    ::close(fd);
    DS_RETURN_IF_ERROR(st);
    return path;
  };
  s.remote = std::move(remote);
  return s;
}

CopyFill Text(const std::string& text) {
  return [text](int fd, uint32_t* crc) -> Status {
    *crc = 0;
    return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size())
               ? OkStatus()
               : InternalError("write");
  };
}

TEST_CASE("every copy is kept locally, then reaches every remote target in order") {
  Received r;
  {
    MemoryCopier copier(3, Sinks({Recorder("a", &r, 5ms), Recorder("b", &r, 5ms)}));
    for (int step = 1; step <= 3; ++step)
      REQUIRE(copier.Copy(step, Text("state" + std::to_string(step))).ok());
    copier.Drain();
    const MemoryCopier::Stats s = copier.stats();
    CHECK(s.copies == 3);
    CHECK(s.sent == 3);
    CHECK(s.failed_sends == 0);
    CHECK(s.bytes == 6);
    CHECK(s.send_ms >= 30.0);  // 3 copies x 2 targets x 5 ms
  }
  REQUIRE(r.log.size() == 6);
  CHECK(r.log[0] == "a:1:state1");
  CHECK(r.log[1] == "b:1:state1");
  CHECK(r.log[5] == "b:3:state3");
}

TEST_CASE("the next copy waits while the last one is being sent") {
  Received r;
  MemoryCopier copier(0, Sinks({Recorder("slow", &r, 150ms)}));
  REQUIRE(copier.Copy(1, Text("a")).ok());
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(copier.Copy(2, Text("b")).ok());  // the send of step 1 is still sleeping
  const double waited =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 100.0);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    REQUIRE(r.log.size() >= 1);
    CHECK(r.log[0] == "slow:1:a");  // step 1's file was not overwritten before it was sent
  }
  CHECK(copier.stats().wait_ms >= 100.0);
}

TEST_CASE(
    "a failed send is counted, the other target still gets the copy; a failed write is an error") {
  Received r;
  MemoryCopier copier(1,
                      Sinks({Recorder("gone", &r, 0ms, /*fail=*/true), Recorder("ok", &r, 0ms)}));
  REQUIRE(copier.Copy(7, Text("x")).ok());
  copier.Drain();
  const MemoryCopier::Stats s = copier.stats();
  CHECK(s.copies == 1);
  CHECK(s.sent == 0);
  CHECK(s.failed_sends == 1);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    REQUIRE(r.log.size() == 2);
    CHECK(r.log[1] == "ok:7:x");
  }
  CHECK(copier.Summary().find("1 failed send") != std::string::npos);
  const Status bad = copier.Copy(8, [](int, uint32_t*) { return DataLossError("disk full"); });
  CHECK(bad.code() == StatusCode::kDataLoss);
  CHECK(bad.message().find("the in-memory copy of step 8") != std::string::npos);
}

}  // namespace
}  // namespace ds::worker
