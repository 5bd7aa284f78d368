// LoopbackCommunicator: every collective against a direct computation, async ordering,
// Split, sticky errors (timeout, mismatch, Abort) and argument checks.
#include "parallel/comm/loopback_communicator.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "parallel/comm/communicator_testing.h"

namespace ds::parallel {
namespace {

using std::chrono::milliseconds;
using testing::RunOnRanks;
using testing::TestValue;

std::vector<Communicator*> Raw(const std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<Communicator*> raw;
  for (const auto& c : comms) raw.push_back(c.get());
  return raw;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

std::string CountsText(const std::vector<int64_t>& counts) {
  std::string s;
  for (int64_t c : counts) s += (s.empty() ? "" : "/") + std::to_string(c);
  return s;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_CASE("Loopback: every collective matches a direct computation", "[parallel][loopback]") {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20}) {
      INFO("world " << world << " count " << count);
      auto comms = LoopbackCommunicator::CreateGroup(world);
      std::vector<std::string> failures = testing::CheckAllCollectives(Raw(comms), count);
      CHECK(Join(failures) == "");
    }
  }
}

TEST_CASE("Loopback: ReduceScatterV matches a sequential reduction", "[parallel][loopback][rsv]") {
  for (int world = 1; world <= 4; ++world) {
    auto comms = LoopbackCommunicator::CreateGroup(world);
    for (int64_t scale : {int64_t{1}, int64_t{50}, int64_t{5000}}) {
      for (const std::vector<int64_t>& counts : testing::ReduceScatterVCounts(world, scale)) {
        for (bool async : {false, true}) {
          INFO("world " << world << " counts " << CountsText(counts) << " async " << async);
          CHECK(Join(testing::CheckReduceScatterV(Raw(comms), counts, async)) == "");
        }
      }
    }
    for (const auto& c : comms) CHECK(c->status().ok());
  }
}

TEST_CASE("Loopback: ReduceScatterV arguments and description", "[parallel][loopback][rsv]") {
  auto comms = LoopbackCommunicator::CreateGroup(3);
  Communicator& c = *comms[1];
  std::vector<float> in(10), out(10);
  const auto rsv = [&](int64_t n_in, int64_t n_out, std::vector<int64_t> counts) {
    return c.ReduceScatterV({in.data(), n_in}, {out.data(), n_out}, std::move(counts),
                            ReduceOp::kSum);
  };
  SECTION("bad arguments are InvalidArgument with the reason, and not sticky") {
    Status wrong_list = rsv(10, 4, {6, 4});
    CHECK(wrong_list.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(
        wrong_list.message(),
        Catch::StartsWith("ReduceScatterV on 'world': expected 3 counts (one per rank), got 2"));
    Status negative = rsv(10, 4, {7, 4, -1});
    CHECK(negative.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(negative.message(), Catch::Contains("count -1 of rank 2 is negative"));
    Status wrong_in = rsv(9, 4, {2, 4, 4});
    CHECK(wrong_in.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(wrong_in.message(),
               Catch::Contains("sum of counts 2/4/4 = 10") && Catch::Contains("input f32 x 9"));
    Status wrong_out = rsv(10, 2, {2, 4, 4});  // rank 1 owns 4
    CHECK(wrong_out.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(wrong_out.message(), Catch::Contains("counts[1] = 4"));
    CHECK(rsv(10, 4, {INT64_MAX, 4, 4}).code() == StatusCode::kInvalidArgument);
    CHECK(c.ReduceScatterV({in.data(), 10}, {out.data(), 4, DType::kI32}, {2, 4, 4}, ReduceOp::kSum)
              .code() == StatusCode::kInvalidArgument);
    CHECK(c.ReduceScatterV({nullptr, 10, DType::kF32}, {out.data(), 4}, {2, 4, 4}, ReduceOp::kSum)
              .code() == StatusCode::kInvalidArgument);
    uint16_t u[10] = {};
    CHECK(c.ReduceScatterV({u, 10, DType::kU16}, {u, 4, DType::kU16}, {2, 4, 4}, ReduceOp::kSum)
              .code() == StatusCode::kUnimplemented);
    CHECK(c.ReduceScatterVAsync({in.data(), 10}, {out.data(), 3}, {2, 4, 4}, ReduceOp::kSum)
              ->Wait()
              .code() == StatusCode::kInvalidArgument);
    CHECK(c.status().ok());
    // Nothing was queued: the next collective is #0 on every rank.
    std::vector<Status> got(3);
    RunOnRanks(3, [&](int r) { got[r] = comms[r]->Barrier(); });
    for (const Status& s : got) CHECK(s.ok());
  }
  SECTION("DescribeOp names the counts") {
    CommOp op;
    op.kind = CommOpKind::kReduceScatterV;
    op.seq = 4;
    op.in = BufferView(in.data(), 1000, DType::kF32);
    op.counts = {250, 0, 700, 50};
    CHECK(DescribeOp(op) == "ReduceScatterV #4 (f32 x 1000 in, counts 250/0/700/50, sum)");
    op.counts.assign(64, 8);
    op.reduce = ReduceOp::kMax;
    CHECK(DescribeOp(op) ==
          "ReduceScatterV #4 (f32 x 1000 in, counts 8/8/8/8/.../8/8/8/8 (64 ranks), max)");
  }
}

TEST_CASE("Loopback: ReduceScatterV failures", "[parallel][loopback][rsv][failure]") {
  SECTION("ranks that disagree about the counts fail with both descriptions") {
    auto comms = LoopbackCommunicator::CreateGroup(2);
    std::vector<Status> got(2);
    RunOnRanks(2, [&](int r) {
      std::vector<float> in(8, 1.0f), out(8);
      const std::vector<int64_t> counts =
          r == 0 ? std::vector<int64_t>{3, 5} : std::vector<int64_t>{4, 4};
      got[r] =
          comms[r]->ReduceScatterV({in.data(), 8}, {out.data(), counts[r]}, counts, ReduceOp::kSum);
    });
    const Status& first = got[0].code() == StatusCode::kFailedPrecondition ? got[0] : got[1];
    INFO(got[0].ToString() << "\n" << got[1].ToString());
    CHECK(got[0].code() != StatusCode::kOk);
    CHECK(got[1].code() != StatusCode::kOk);
    CHECK(first.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(first.message(), Catch::Contains("counts 3/5") && Catch::Contains("counts 4/4"));
  }
  SECTION("a missing peer times out; the error is sticky") {
    LoopbackOptions options;
    options.timeout = milliseconds(300);
    auto comms = LoopbackCommunicator::CreateGroup(3, options);
    std::vector<Status> got(3), later(3);
    RunOnRanks(2, [&](int r) {  // rank 2 never calls
      std::vector<float> in(6, 1.0f), out(6);
      const std::vector<int64_t> counts = {0, 6, 0};
      got[r] =
          comms[r]
              ->ReduceScatterVAsync({in.data(), 6}, {out.data(), counts[r]}, counts, ReduceOp::kSum)
              ->Wait();
      later[r] = comms[r]->Barrier();
    });
    for (int r = 0; r < 2; ++r) {
      INFO(got[r].ToString());
      CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
             got[r].code() == StatusCode::kUnavailable));
      CHECK_THAT(got[r].message(), Catch::Contains("ReduceScatterV #0"));
      CHECK(later[r].message() == got[r].message());
    }
  }
}

TEST_CASE("Loopback: async operations run in issue order", "[parallel][loopback][async]") {
  SECTION("all collectives issued back to back, waited in reverse") {
    auto comms = LoopbackCommunicator::CreateGroup(3);
    CHECK(Join(testing::CheckAsyncCollectives(Raw(comms), 1000)) == "");
  }
  SECTION("an async op returns before peers arrive; later ops complete after earlier ones") {
    auto comms = LoopbackCommunicator::CreateGroup(2);
    std::atomic<bool> issued{false};
    std::vector<std::string> failures(2);
    RunOnRanks(2, [&](int r) {
      Communicator& c = *comms[r];
      std::vector<float> a(4096, 1.0f), b(16, 2.0f);
      if (r == 1) {
        while (!issued) std::this_thread::yield();
      }
      auto first = c.AllReduceAsync({a.data(), 4096}, ReduceOp::kSum);
      auto second = c.AllReduceAsync({b.data(), 16}, ReduceOp::kSum);
      if (r == 0) {
        // Rank 1 has not issued anything yet: nothing can have completed.
        if (first->Done() || second->Done()) failures[r] = "completed without the peer";
        issued = true;
      }
      Status s = second->Wait();
      if (!s.ok()) failures[r] = s.ToString();
      if (!first->Done()) failures[r] = "the second op completed before the first";
      if (!first->Wait().ok() || a[0] != 2.0f || b[0] != 4.0f) failures[r] = "wrong result";
      // A sync op after async ones sees them done.
      auto third = c.BarrierAsync();
      if (!c.Barrier().ok() || !third->Done()) failures[r] = "barrier overtook";
    });
    CHECK(failures[0] == "");
    CHECK(failures[1] == "");
  }
}

TEST_CASE("Loopback: Split makes independent process groups", "[parallel][loopback][split]") {
  auto comms = LoopbackCommunicator::CreateGroup(4);
  std::vector<std::string> failures(4);
  RunOnRanks(4, [&](int r) {
    Communicator& c = *comms[r];
    auto fail = [&](const std::string& what) { failures[r] += what + "; "; };
    // Every rank calls every Split; same name twice is fine (the call order tells them apart).
    StatusOr<std::unique_ptr<Communicator>> even = c.Split({0, 2}, "pair");
    StatusOr<std::unique_ptr<Communicator>> odd = c.Split({3, 1}, "pair");
    if (!even.ok() || !odd.ok()) return fail("split failed");
    std::unique_ptr<Communicator>& mine = r % 2 == 0 ? *even : *odd;
    if ((r % 2 == 0 ? *odd : *even) != nullptr) fail("non-member got a communicator");
    if (!mine) return fail("member got nullptr");
    if (mine->size() != 2) fail("size");
    const int want_rank = r == 3 ? 0 : (r == 1 ? 1 : r / 2);  // order of the ranks argument
    if (mine->rank() != want_rank) fail("rank " + std::to_string(mine->rank()));
    if (mine->name() != "world/pair") fail("name " + mine->name());
    std::vector<float> v(100);
    for (int i = 0; i < 100; ++i) v[i] = TestValue(r, i);
    if (!mine->AllReduce({v.data(), 100}, ReduceOp::kSum).ok()) return fail("allreduce");
    const int other = r % 2 == 0 ? 2 - r : 4 - r;
    for (int i = 0; i < 100; ++i) {
      if (v[i] != TestValue(r, i) + TestValue(other, i)) return fail("wrong sum");
    }
    // The parent still works, and a failure of the child does not touch it.
    if (r == 0) mine->Abort("child only");
    if (!c.Barrier().ok()) fail("parent barrier");
  });
  for (int r = 0; r < 4; ++r) CHECK(failures[r] == "");
}

TEST_CASE("Loopback: Split rejects bad rank lists", "[parallel][loopback][split]") {
  auto comms = LoopbackCommunicator::CreateGroup(2);
  CHECK(comms[0]->Split({}, "x").status().code() == StatusCode::kInvalidArgument);
  CHECK(comms[0]->Split({0, 0}, "x").status().code() == StatusCode::kInvalidArgument);
  CHECK(comms[0]->Split({0, 2}, "x").status().code() == StatusCode::kInvalidArgument);
  CHECK(comms[0]->Split({0}, "a/b").status().code() == StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<Communicator>> solo = comms[0]->Split({0}, "solo");
  REQUIRE(solo.ok());
  REQUIRE(*solo != nullptr);
  float x = 3.0f;
  CHECK((*solo)->AllReduce({&x, 1}, ReduceOp::kSum).ok());
  CHECK(x == 3.0f);
}

TEST_CASE("Loopback: a peer that stops participating fails the others, never hangs",
          "[parallel][loopback][failure]") {
  LoopbackOptions options;
  options.timeout = milliseconds(300);
  auto comms = LoopbackCommunicator::CreateGroup(3, options);
  std::vector<Status> got(3), later(3);
  const auto start = std::chrono::steady_clock::now();
  RunOnRanks(2, [&](int r) {  // rank 2 never calls
    std::vector<float> v(10, 1.0f);
    got[r] = comms[r]->AllReduce({v.data(), 10}, ReduceOp::kSum);
    later[r] = comms[r]->Barrier();
  });
  CHECK(SecondsSince(start) < 2.0);
  for (int r = 0; r < 2; ++r) {
    INFO(got[r].ToString());
    CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
           got[r].code() == StatusCode::kUnavailable));
    CHECK_THAT(got[r].message(), Catch::Contains("AllReduce #0"));
    CHECK_THAT(got[r].message(), Catch::Contains("waiting for rank 2"));
    // Sticky: the same status again, without running anything.
    CHECK(later[r].code() == got[r].code());
    CHECK(later[r].message() == got[r].message());
    CHECK(comms[r]->status().message() == got[r].message());
  }
  // The late rank finds the group failed instead of waiting.
  float x = 1.0f;
  Status late = comms[2]->AllReduce({&x, 1}, ReduceOp::kSum);
  CHECK(late.code() == StatusCode::kUnavailable);
}

TEST_CASE("Loopback: Abort releases every rank with the same error", "[parallel][loopback]") {
  LoopbackOptions options;
  options.timeout = milliseconds(20000);
  auto comms = LoopbackCommunicator::CreateGroup(3, options);
  std::vector<Status> got(3);
  const auto start = std::chrono::steady_clock::now();
  RunOnRanks(3, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(milliseconds(100));
      comms[0]->Abort("operator stop");
      float x = 0;
      got[0] = comms[0]->AllReduce({&x, 1}, ReduceOp::kSum);
      return;
    }
    std::vector<float> v(10, 1.0f);
    got[r] = comms[r]->AllReduce({v.data(), 10}, ReduceOp::kSum);
  });
  CHECK(SecondsSince(start) < 5.0);
  for (int r = 0; r < 3; ++r) {
    INFO(got[r].ToString());
    CHECK(got[r].code() == StatusCode::kAborted);
    CHECK_THAT(got[r].message(), Catch::Contains("operator stop"));
  }
}

TEST_CASE("Loopback: mismatched collectives fail both ranks", "[parallel][loopback]") {
  auto comms = LoopbackCommunicator::CreateGroup(2);
  std::vector<Status> got(2);
  RunOnRanks(2, [&](int r) {
    std::vector<float> in(7, 1.0f), out(14);
    got[r] = r == 0 ? comms[r]->AllReduce({in.data(), 7}, ReduceOp::kSum)
                    : comms[r]->AllGather({in.data(), 7}, {out.data(), 14});
  });
  CHECK(got[0].code() != StatusCode::kOk);
  CHECK(got[1].code() != StatusCode::kOk);
  const Status& first = got[0].code() == StatusCode::kFailedPrecondition ? got[0] : got[1];
  CHECK(first.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(first.message(), Catch::Contains("AllReduce #0") && Catch::Contains("AllGather #0"));
}

TEST_CASE("Loopback: argument errors are returned and not sticky", "[parallel][loopback]") {
  auto comms = LoopbackCommunicator::CreateGroup(2);
  Communicator& c = *comms[0];
  std::vector<float> a(8), b(8);
  uint16_t u[4] = {};
  CHECK(c.ReduceScatter({a.data(), 8}, {b.data(), 3}, ReduceOp::kSum).code() ==
        StatusCode::kInvalidArgument);
  CHECK(c.AllGather({a.data(), 4}, {b.data(), 7}).code() == StatusCode::kInvalidArgument);
  CHECK(c.AllToAll({a.data(), 7}, {b.data(), 7}).code() == StatusCode::kInvalidArgument);
  CHECK(c.Broadcast({a.data(), 8}, 2).code() == StatusCode::kInvalidArgument);
  CHECK(c.Send({a.data(), 8}, 0, 1).code() == StatusCode::kInvalidArgument);
  CHECK(c.Recv({a.data(), 8}, -1, 1).code() == StatusCode::kInvalidArgument);
  CHECK(c.AllReduce({nullptr, 4, DType::kF32}, ReduceOp::kSum).code() ==
        StatusCode::kInvalidArgument);
  CHECK(c.AllReduce({u, 4, DType::kU16}, ReduceOp::kSum).code() == StatusCode::kUnimplemented);
  Status bad = c.AllGather({a.data(), 4}, {b.data(), 7});
  CHECK_THAT(bad.message(), Catch::StartsWith("AllGather on 'world': expected output count"));
  CHECK(c.status().ok());
  // Nothing was queued: the next collective is #0 on both ranks.
  std::vector<Status> got(2);
  RunOnRanks(2, [&](int r) { got[r] = comms[r]->Barrier(); });
  CHECK(got[0].ok());
  CHECK(got[1].ok());
}

TEST_CASE("Loopback: point to point", "[parallel][loopback][p2p]") {
  auto comms = LoopbackCommunicator::CreateGroup(2);
  SECTION("messages of one tag arrive in order; tags are separate queues") {
    std::vector<float> got(3, 0.0f);
    std::vector<Status> s(2);
    RunOnRanks(2, [&](int r) {
      Communicator& c = *comms[r];
      if (r == 0) {
        float x = 1, y = 2, z = 3;
        auto h1 = c.SendAsync({&x, 1}, 1, 7);
        auto h2 = c.SendAsync({&y, 1}, 1, 7);
        auto h3 = c.SendAsync({&z, 1}, 1, 9);
        s[0] = h3->Wait();
      } else {
        Status a = c.Recv({&got[0], 1}, 0, 7);
        Status b = c.Recv({&got[1], 1}, 0, 7);
        s[1] = c.Recv({&got[2], 1}, 0, 9);
        if (!a.ok()) s[1] = a;
        if (!b.ok()) s[1] = b;
      }
    });
    CHECK(s[0].ok());
    CHECK(s[1].ok());
    CHECK(got == std::vector<float>{1, 2, 3});
  }
  SECTION("a size mismatch fails both sides") {
    std::vector<Status> s(2);
    RunOnRanks(2, [&](int r) {
      std::vector<float> v(8);
      s[r] = r == 0 ? comms[0]->Send({v.data(), 8}, 1, 1) : comms[1]->Recv({v.data(), 4}, 0, 1);
    });
    CHECK(s[0].code() == StatusCode::kFailedPrecondition);
    CHECK(s[1].code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(s[1].message(), Catch::Contains("f32 x 8"));
  }
}

}  // namespace
}  // namespace ds::parallel
