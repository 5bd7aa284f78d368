// GlooCommunicator: ranks as threads of this process, each with its own Gloo context over TCP
// on 127.0.0.1, bootstrapped through Gloo's in-process HashStore. The rendezvous through the
// coordinator's store (GrpcStore), as workers do it, is tested in launcher/kv.
#include "parallel/comm/gloo_communicator.h"

#include <gloo/rendezvous/hash_store.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "parallel/comm/communicator_testing.h"

namespace ds::parallel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RunOnRanks;
using testing::TestValue;

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

// `n` ranks over one in-process store; communicators are made by Create().
class Cluster {
 public:
  explicit Cluster(int n) : n_(n) {}

  // Creates the communicators of `ranks` concurrently (rendezvous blocks until all arrive).
  std::vector<StatusOr<std::unique_ptr<GlooCommunicator>>> TryCreate(
      const std::vector<int>& ranks, milliseconds timeout, const std::string& name = "world") {
    std::vector<StatusOr<std::unique_ptr<GlooCommunicator>>> made;
    for (size_t i = 0; i < ranks.size(); ++i) made.emplace_back(UnknownError("not run"));
    RunOnRanks(static_cast<int>(ranks.size()), [&](int i) {
      GlooOptions options;
      options.rank = ranks[i];
      options.size = n_;
      options.name = name;
      options.timeout = timeout;
      made[i] = GlooCommunicator::Create(options, &store_);
    });
    return made;
  }

  std::vector<Communicator*> Create(milliseconds timeout = seconds(20)) {
    std::vector<int> all;
    for (int r = 0; r < n_; ++r) all.push_back(r);
    std::vector<StatusOr<std::unique_ptr<GlooCommunicator>>> made = TryCreate(all, timeout);
    std::vector<Communicator*> raw;
    for (auto& m : made) {
      INFO(m.status().ToString());
      REQUIRE(m.ok());
      comms_.push_back(std::move(m).value());
      raw.push_back(comms_.back().get());
    }
    return raw;
  }

 private:
  const int n_;
  gloo::rendezvous::HashStore store_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // last: destroyed before the store
};

TEST_CASE("Gloo: every collective matches a direct computation", "[parallel][gloo]") {
  for (int world = 1; world <= 4; ++world) {
    Cluster cluster(world);
    std::vector<Communicator*> comms = cluster.Create();
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20}) {
      INFO("world " << world << " count " << count);
      CHECK(Join(testing::CheckAllCollectives(comms, count)) == "");
    }
    INFO("async, world " << world);
    CHECK(Join(testing::CheckAsyncCollectives(comms, 1000)) == "");
    for (Communicator* c : comms) CHECK(c->status().ok());
  }
}

TEST_CASE("Gloo: ReduceScatterV matches a sequential reduction", "[parallel][gloo][rsv]") {
  // Scale 1 and 50 take the one-hop path; 5000 the ring (inputs of 80 KB and more).
  for (int world = 1; world <= 4; ++world) {
    Cluster cluster(world);
    std::vector<Communicator*> comms = cluster.Create();
    for (int64_t scale : {int64_t{1}, int64_t{50}, int64_t{5000}}) {
      for (const std::vector<int64_t>& counts : testing::ReduceScatterVCounts(world, scale)) {
        for (bool async : {false, true}) {
          INFO("world " << world << " counts " << CountsText(counts) << " async " << async);
          CHECK(Join(testing::CheckReduceScatterV(comms, counts, async)) == "");
        }
      }
    }
    for (Communicator* c : comms) CHECK(c->status().ok());
  }
}

TEST_CASE("Gloo: ReduceScatterV failures end in errors, not hangs or crashes",
          "[parallel][gloo][rsv][failure]") {
  // 1000 elements in all take the one-hop path, 1 << 16 the ring.
  const int64_t total = GENERATE(int64_t{1000}, int64_t{1} << 16);
  INFO("total " << total);
  SECTION("a peer that never issues it: every other rank fails within the timeout") {
    Cluster cluster(3);
    std::vector<Communicator*> comms = cluster.Create(seconds(2));
    std::vector<Status> got(3), later(3);
    const std::vector<int64_t> counts = {0, total - 10, 10};
    const auto start = std::chrono::steady_clock::now();
    RunOnRanks(2, [&](int r) {  // rank 2 is alive but idle
      std::vector<float> in(total, 1.0f), out(total);
      got[r] = comms[r]->ReduceScatterV({in.data(), total}, {out.data(), counts[r]}, counts,
                                        ReduceOp::kSum);
      later[r] = comms[r]->Barrier();
    });
    CHECK(SecondsSince(start) < 5.0);
    for (int r = 0; r < 2; ++r) {
      INFO(got[r].ToString());
      CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
             got[r].code() == StatusCode::kUnavailable));
      CHECK_THAT(got[r].message(), Catch::Contains("ReduceScatterV #0"));
      CHECK(later[r].message() == got[r].message());  // sticky
    }
  }
  SECTION("ranks that disagree about the counts time out") {
    Cluster cluster(2);
    std::vector<Communicator*> comms = cluster.Create(milliseconds(500));
    std::vector<Status> got(2);
    RunOnRanks(2, [&](int r) {
      const std::vector<int64_t> counts = {total / 2 - r, total / 2 + r};
      std::vector<float> in(total, 1.0f), out(total);
      got[r] = comms[r]->ReduceScatterV({in.data(), total}, {out.data(), counts[r]}, counts,
                                        ReduceOp::kSum);
    });
    for (int r = 0; r < 2; ++r) {
      INFO(got[r].ToString());
      CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
             got[r].code() == StatusCode::kUnavailable));
    }
  }
}

TEST_CASE("Gloo: Split makes process groups over the same store", "[parallel][gloo][split]") {
  Cluster cluster(4);
  std::vector<Communicator*> comms = cluster.Create();
  std::vector<std::string> failures(4);
  RunOnRanks(4, [&](int r) {
    auto fail = [&](const std::string& what) { failures[r] += what + "; "; };
    StatusOr<std::unique_ptr<Communicator>> even = comms[r]->Split({0, 2}, "dp");
    StatusOr<std::unique_ptr<Communicator>> odd = comms[r]->Split({3, 1}, "dp");
    if (!even.ok() || !odd.ok()) {
      return fail("split: " + (even.ok() ? odd.status() : even.status()).ToString());
    }
    std::unique_ptr<Communicator>& mine = r % 2 == 0 ? *even : *odd;
    if (!mine || (r % 2 == 0 ? *odd : *even) != nullptr) return fail("membership");
    if (mine->name() != "world/dp" || mine->size() != 2) fail("name or size");
    std::vector<float> v(1000);
    for (int i = 0; i < 1000; ++i) v[i] = TestValue(r, i);
    Status s = mine->AllReduce({v.data(), 1000}, ReduceOp::kSum);
    if (!s.ok()) return fail(s.ToString());
    const int other = r % 2 == 0 ? 2 - r : 4 - r;
    for (int i = 0; i < 1000; ++i) {
      if (v[i] != TestValue(r, i) + TestValue(other, i)) return fail("wrong sum");
    }
    s = comms[r]->Barrier();
    if (!s.ok()) fail("parent: " + s.ToString());
  });
  for (int r = 0; r < 4; ++r) CHECK(failures[r] == "");
}

TEST_CASE("Gloo: a peer that stops participating fails every rank within the timeout",
          "[parallel][gloo][failure]") {
  // 1000 floats take the one-hop path, 1 << 16 the ring (gloo_collectives.cc).
  const int64_t count = GENERATE(int64_t{1000}, int64_t{1} << 16);
  INFO("count " << count);
  Cluster cluster(3);
  std::vector<Communicator*> comms = cluster.Create(seconds(2));
  std::vector<Status> got(3), later(3);
  const auto start = std::chrono::steady_clock::now();
  RunOnRanks(2, [&](int r) {  // rank 2 is alive but never issues the AllReduce
    std::vector<float> v(count, 1.0f);
    got[r] = comms[r]->AllReduce({v.data(), count}, ReduceOp::kSum);
    later[r] = comms[r]->Barrier();
  });
  const double elapsed = SecondsSince(start);
  CHECK(elapsed >= 1.9);
  CHECK(elapsed < 5.0);  // timeout + the wait for the failed peer's report
  // Rank 0 receives from rank 2 and rank 1 sends to it (in the ring and in one hop): whichever
  // times out first names rank 2; the other may instead see that rank's connections close and
  // quote its report, which names rank 2 too.
  for (int r = 0; r < 2; ++r) {
    INFO(got[r].ToString());
    CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
           got[r].code() == StatusCode::kUnavailable));
    CHECK_THAT(got[r].message(),
               Catch::Contains("AllReduce #0") &&
                   (Catch::Contains("from rank 2") || Catch::Contains("to rank 2")));
  }
  for (int r = 0; r < 2; ++r) {
    CHECK(later[r].code() == got[r].code());  // sticky
    CHECK(later[r].message() == got[r].message());
  }
  // The idle rank finds its connections closed at its next operation: an error, not a hang.
  const auto late_start = std::chrono::steady_clock::now();
  float x = 1.0f;
  Status late = comms[2]->AllReduce({&x, 1}, ReduceOp::kSum);
  INFO(late.ToString());
  CHECK(late.code() == StatusCode::kUnavailable);
  CHECK(SecondsSince(late_start) < 3.0);
}

TEST_CASE("Gloo: Abort releases the peers at once", "[parallel][gloo][failure]") {
  Cluster cluster(3);
  std::vector<Communicator*> comms = cluster.Create(seconds(20));
  std::vector<Status> got(3);
  const auto start = std::chrono::steady_clock::now();
  RunOnRanks(3, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(milliseconds(200));
      comms[0]->Abort("operator stop");
      float x = 0;
      got[0] = comms[0]->AllReduce({&x, 1}, ReduceOp::kSum);
      return;
    }
    std::vector<float> v(1 << 16, 1.0f);
    got[r] = comms[r]->AllReduce({v.data(), 1 << 16}, ReduceOp::kSum);
  });
  CHECK(SecondsSince(start) < 5.0);  // far below the 20 s timeout
  CHECK(got[0].code() == StatusCode::kAborted);
  for (int r = 1; r < 3; ++r) {
    INFO(got[r].ToString());
    CHECK(got[r].code() == StatusCode::kUnavailable);
    CHECK_THAT(got[r].message(), Catch::Contains("operator stop"));
  }
}

TEST_CASE("Gloo: ranks that disagree about an operation time out instead of crashing",
          "[parallel][gloo][failure]") {
  Cluster cluster(2);
  std::vector<Communicator*> comms = cluster.Create(milliseconds(500));
  std::vector<Status> got(2);
  RunOnRanks(2, [&](int r) {
    std::vector<float> v(64, 1.0f);
    got[r] = comms[r]->AllReduce({v.data(), r == 0 ? 16 : 64}, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    INFO(got[r].ToString());
    CHECK((got[r].code() == StatusCode::kDeadlineExceeded ||
           got[r].code() == StatusCode::kUnavailable));
  }
}

TEST_CASE("Gloo: rendezvous errors", "[parallel][gloo]") {
  Cluster cluster(2);
  SECTION("a missing rank: DeadlineExceeded") {
    auto made = cluster.TryCreate({0}, milliseconds(500));
    INFO(made[0].status().ToString());
    CHECK(made[0].status().code() == StatusCode::kDeadlineExceeded);
  }
  SECTION("bad options") {
    gloo::rendezvous::HashStore* none = nullptr;
    GlooOptions options;
    options.rank = 2;
    options.size = 2;
    CHECK(GlooCommunicator::Create(options, none).status().code() == StatusCode::kInvalidArgument);
    options.rank = 0;
    options.hostname = "no-such-host.invalid";
    gloo::rendezvous::HashStore store;
    Status unresolvable = GlooCommunicator::Create(options, &store).status();
    CHECK(unresolvable.code() == StatusCode::kUnavailable);
    CHECK_THAT(unresolvable.message(), Catch::Contains("cannot resolve hostname"));
  }
}

}  // namespace
}  // namespace ds::parallel
