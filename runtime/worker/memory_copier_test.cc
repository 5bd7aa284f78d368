// MemoryCopier: one copy in flight, every target sent in order, a failed send counted and not
// fatal, Acquire blocking the loop while a send runs.
#include "runtime/worker/memory_copier.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace ds::worker {
namespace {

using namespace std::chrono_literals;

struct Received {
  std::mutex mu;
  std::vector<std::string> log;  // "target:step:bytes"
};

CopyTarget Recorder(const std::string& name, Received* r, std::chrono::milliseconds delay,
                    bool fail = false) {
  return {name, [=](int64_t step, const std::string& copy) -> Status {
            std::this_thread::sleep_for(delay);
            std::lock_guard<std::mutex> lock(r->mu);
            r->log.push_back(name + ":" + std::to_string(step) + ":" + copy);
            return fail ? UnavailableError(name + " is gone") : OkStatus();
          }};
}

TEST_CASE("every copy reaches every target in order, one in flight at a time") {
  Received r;
  {
    MemoryCopier copier(3, {Recorder("local", &r, 5ms), Recorder("buddy", &r, 5ms)});
    for (int step = 1; step <= 3; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      std::string* buf = copier.Acquire();
      *buf = "state" + std::to_string(step);
      copier.Send(step, t0);
    }
    copier.Drain();
    const MemoryCopier::Stats s = copier.stats();
    CHECK(s.copies == 3);
    CHECK(s.attempts == 3);
    CHECK(s.failed_sends == 0);
    CHECK(s.bytes == 6);
    CHECK(s.send_ms >= 30.0);  // 3 copies x 2 targets x 5 ms
  }
  REQUIRE(r.log.size() == 6);
  CHECK(r.log[0] == "local:1:state1");
  CHECK(r.log[1] == "buddy:1:state1");
  CHECK(r.log[4] == "local:3:state3");
  CHECK(r.log[5] == "buddy:3:state3");
}

TEST_CASE("Acquire waits while the last copy is being sent") {
  Received r;
  MemoryCopier copier(0, {Recorder("slow", &r, 150ms)});
  std::string* buf = copier.Acquire();
  *buf = "a";
  copier.Send(1, std::chrono::steady_clock::now());
  const auto t0 = std::chrono::steady_clock::now();
  buf = copier.Acquire();  // the send of step 1 is still sleeping
  const double waited =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 100.0);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    REQUIRE(r.log.size() == 1);  // it returned only after the send
  }
  CHECK(copier.stats().wait_ms >= 100.0);
}

TEST_CASE("a failed send is counted, the other target still gets the copy") {
  Received r;
  MemoryCopier copier(1, {Recorder("gone", &r, 0ms, /*fail=*/true), Recorder("ok", &r, 0ms)});
  std::string* buf = copier.Acquire();
  *buf = "x";
  copier.Send(7, std::chrono::steady_clock::now());
  copier.Drain();
  const MemoryCopier::Stats s = copier.stats();
  CHECK(s.copies == 0);
  CHECK(s.attempts == 1);
  CHECK(s.failed_sends == 1);
  std::lock_guard<std::mutex> lock(r.mu);
  REQUIRE(r.log.size() == 2);
  CHECK(r.log[1] == "ok:7:x");
  CHECK(copier.Summary().find("1 failed send") != std::string::npos);
}

}  // namespace
}  // namespace ds::worker
