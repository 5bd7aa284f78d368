// CollectiveWatchdog with a fake clock and fake operations: timeout detection, the error
// text, async errors, abort exactly once, sticky failure, Wait() and the polling thread.
#include "parallel/comm/nccl/watchdog.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "parallel/comm/nccl/kv_store.h"

namespace ds::parallel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Operations finish when the test says so; errors are injected by hand.
class FakeProbe final : public WatchdogProbe {
 public:
  StatusOr<bool> Finished(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu);
    if (id == failing_id) return InternalError("cudaErrorIllegalAddress (700): illegal address");
    return done.count(id) > 0;
  }
  Status AsyncError() override {
    std::lock_guard<std::mutex> lock(mu);
    return async_error;
  }
  void Abort(const Status& cause) override {
    std::lock_guard<std::mutex> lock(mu);
    ++aborts;
    abort_cause = cause;
  }
  void Finish(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    done.insert(id);
  }

  std::mutex mu;
  std::set<uint64_t> done;
  uint64_t failing_id = ~uint64_t{0};
  Status async_error;
  int aborts = 0;
  Status abort_cause;
};

struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  CollectiveWatchdog::Clock fn() {
    return [this] { return now; };
  }
};

WatchdogOptions Options(milliseconds timeout) {
  WatchdogOptions o;
  o.timeout = timeout;
  o.poll_interval = milliseconds(1);
  return o;
}

TEST_CASE("Watchdog: finished operations are forgotten, no timeout before the limit",
          "[parallel][nccl]") {
  FakeProbe probe;
  FakeClock clock;
  CollectiveWatchdog wd("rank 3 of world", Options(seconds(30)), &probe, clock.fn());
  wd.Track(1, "AllReduce #0 (f32 x 10, sum)");
  wd.Track(2, "AllGather #1 (f32 x 10)");
  CHECK(wd.in_flight() == 2);
  clock.now += seconds(29);
  CHECK(wd.Poll().ok());
  probe.Finish(1);
  CHECK(wd.Poll().ok());
  CHECK(wd.in_flight() == 1);
  probe.Finish(2);
  clock.now += seconds(100);  // past the limit, but finished
  CHECK(wd.Poll().ok());
  CHECK(wd.in_flight() == 0);
  CHECK(wd.Wait(2).ok());
  CHECK(probe.aborts == 0);
}

TEST_CASE("Watchdog: a collective past the timeout aborts, naming rank, group and op",
          "[parallel][nccl]") {
  FakeProbe probe;
  FakeClock clock;
  CollectiveWatchdog wd("rank 3 of world", Options(seconds(30)), &probe, clock.fn());
  clock.now += seconds(5);
  wd.Track(12, "AllReduce #12 (bf16 x 4194304, sum)");
  clock.now += seconds(5);
  wd.Track(13, "AllGather #13 (bf16 x 1024)");
  clock.now += seconds(29);  // #12 has run 34 s, #13 29 s
  probe.Finish(13);          // a later op finishing does not excuse an earlier one
  const Status s = wd.Poll();
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(s.message() ==
        "rank 3 of world: AllReduce #12 (bf16 x 4194304, sum) did not finish within 30 s; "
        "communicator aborted");
  CHECK(probe.aborts == 1);
  CHECK(probe.abort_cause.message() == s.message());

  // Sticky: every later call returns it; abort is not repeated.
  CHECK(wd.Poll().message() == s.message());
  CHECK(wd.status().message() == s.message());
  CHECK(wd.Wait(12).message() == s.message());
  CHECK(wd.Wait(99).message() == s.message());
  wd.Fail(InternalError("later failure"));
  CHECK(wd.status().message() == s.message());
  CHECK(probe.aborts == 1);
}

TEST_CASE("Watchdog: the timeout boundary and sub-second timeouts", "[parallel][nccl]") {
  FakeProbe probe;
  FakeClock clock;
  CollectiveWatchdog wd("rank 0 of world/dp0", Options(milliseconds(1500)), &probe, clock.fn());
  wd.Track(7, "Barrier #7");
  clock.now += milliseconds(1499);
  CHECK(wd.Poll().ok());
  clock.now += milliseconds(1);
  CHECK(wd.Poll().message() ==
        "rank 0 of world/dp0: Barrier #7 did not finish within 1500 ms; communicator aborted");
  CHECK(CollectiveWatchdog::FormatTimeout(seconds(300)) == "300 s");
}

TEST_CASE("Watchdog: an async NCCL error aborts at once, naming the op in flight",
          "[parallel][nccl]") {
  FakeProbe probe;
  FakeClock clock;
  CollectiveWatchdog wd("rank 1 of world", Options(seconds(300)), &probe, clock.fn());
  SECTION("with an operation in flight") {
    wd.Track(4, "Broadcast #4 (f32 x 8, root 0)");
    probe.async_error = UnavailableError("remote process exited or there was a network error");
    const Status s = wd.Poll();
    CHECK(s.code() == StatusCode::kUnavailable);
    CHECK(s.message() ==
          "rank 1 of world: Broadcast #4 (f32 x 8, root 0) failed: remote process exited or "
          "there was a network error; communicator aborted");
  }
  SECTION("while idle") {
    probe.async_error = InternalError("unhandled system error");
    CHECK(wd.Poll().message() ==
          "rank 1 of world: NCCL error: unhandled system error; communicator aborted");
  }
  SECTION("a failed event query") {
    wd.Track(5, "AllToAll #5 (f32 x 8)");
    probe.failing_id = 5;
    CHECK_THAT(wd.Poll().message(),
               Catch::StartsWith("rank 1 of world: AllToAll #5 (f32 x 8) failed: "
                                 "cudaErrorIllegalAddress"));
  }
  CHECK(probe.aborts == 1);
}

TEST_CASE("Watchdog: Fail from outside aborts once and wakes waiters", "[parallel][nccl]") {
  FakeProbe probe;
  CollectiveWatchdog wd("rank 0 of world", Options(seconds(300)), &probe);
  wd.Track(1, "AllReduce #1 (f32 x 1, sum)");
  std::atomic<bool> returned{false};
  Status waited;
  std::thread waiter([&] {
    waited = wd.Wait(1);
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(20));
  CHECK_FALSE(returned);
  wd.Fail(AbortedError("communicator 'world' rank 0 aborted: test"));
  waiter.join();
  CHECK(waited.code() == StatusCode::kAborted);
  CHECK(probe.aborts == 1);
}

TEST_CASE("Watchdog: Wait returns when the operation finishes", "[parallel][nccl]") {
  FakeProbe probe;
  CollectiveWatchdog wd("rank 0 of world", Options(seconds(300)), &probe);
  wd.Track(1, "AllReduce #1 (f32 x 1, sum)");
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(20));
    probe.Finish(1);
  });
  CHECK(wd.Wait(1).ok());
  finisher.join();
  CHECK(wd.in_flight() == 0);
  CHECK(wd.Wait(12345).ok());  // never tracked
}

TEST_CASE("Watchdog: the background thread detects a hang nobody waits for (real clock)",
          "[parallel][nccl]") {
  FakeProbe probe;
  CollectiveWatchdog wd("rank 2 of world", Options(milliseconds(50)), &probe);
  wd.Start();
  wd.Track(3, "ReduceScatter #3 (f32 x 64, sum)");
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (wd.status().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  CHECK(wd.status().message() ==
        "rank 2 of world: ReduceScatter #3 (f32 x 64, sum) did not finish within 50 ms; "
        "communicator aborted");
  wd.Stop();
  CHECK(probe.aborts == 1);
}

TEST_CASE("InMemoryKvStore: Get waits for Set, or times out naming the key", "[parallel][nccl]") {
  InMemoryKvStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    REQUIRE(store.Set("world/nccl-id", std::string("\0\1\2", 3)).ok());
  });
  StatusOr<std::string> v = store.Get("world/nccl-id", seconds(10));
  setter.join();
  REQUIRE(v.ok());
  CHECK(*v == std::string("\0\1\2", 3));
  StatusOr<std::string> missing = store.Get("dp0/nccl-id", milliseconds(10));
  CHECK(missing.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(missing.status().message(), Catch::Contains("dp0/nccl-id"));
}

}  // namespace
}  // namespace ds::parallel
