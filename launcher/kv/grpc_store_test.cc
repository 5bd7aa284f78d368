// GrpcStore against a real CoordinatorServer on 127.0.0.1 (port 0).
#include "launcher/kv/grpc_store.h"

#include <gloo/common/error.h>

#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/coordinator_server.h"
#include "parallel/comm/gloo_communicator.h"

namespace ds::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<launcher::CoordinatorServer> StartServer() {
  launcher::CoordinatorOptions options;
  options.bind_address = "127.0.0.1:0";
  options.token = "t0ken";
  options.config.nodes = {{"localhost", 2}};
  StatusOr<std::unique_ptr<launcher::CoordinatorServer>> server =
      launcher::CoordinatorServer::Start(options);
  REQUIRE(server.ok());
  return std::move(server).value();
}

std::unique_ptr<launcher::CoordinatorClient> Connect(const launcher::CoordinatorServer& server) {
  launcher::ClientOptions options;
  options.address = server.address();
  options.token = "t0ken";
  StatusOr<std::unique_ptr<launcher::CoordinatorClient>> client =
      launcher::CoordinatorClient::Create(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

TEST_CASE("GrpcStore: set, blocking get, wait, prefixes", "[parallel][grpc_store]") {
  auto server = StartServer();
  auto client_a = Connect(*server);
  auto client_b = Connect(*server);
  GrpcStore a(client_a.get(), 1, "job", seconds(5));
  GrpcStore b(client_b.get(), 0, "job", seconds(5));  // round 0 = the current one (1)
  GrpcStore other(client_b.get(), 1, "other", seconds(5));

  // get() blocks until the key appears (Gloo's connectFullMesh relies on it).
  auto getter = std::async(std::launch::async, [&] { return b.get("rank_0"); });
  auto waiter = std::async(std::launch::async, [&] {
    b.wait({"rank_0", "rank_1"});
    return true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  const std::vector<char> binary = {'\0', '\x01', '\xff', 'a'};
  a.set("rank_0", binary);
  CHECK(getter.get() == binary);
  REQUIRE(a.Set("rank_1", Bytes("x")).ok());
  CHECK(waiter.get());

  StatusOr<std::vector<char>> got = b.Get("rank_1", milliseconds(100));
  REQUIRE(got.ok());
  CHECK(*got == Bytes("x"));
  // Keys live under the prefix: another prefix does not see them.
  CHECK(other.Get("rank_1", milliseconds(100)).status().code() == StatusCode::kDeadlineExceeded);
  StatusOr<std::string> raw = client_a->KvGet(1, "job/rank_1", milliseconds(100));
  REQUIRE(raw.ok());
  CHECK(*raw == "x");
}

TEST_CASE("GrpcStore: timeouts name the missing keys; Gloo's interface throws",
          "[parallel][grpc_store]") {
  auto server = StartServer();
  auto client = Connect(*server);
  GrpcStore store(client.get(), 1, "g", milliseconds(200));
  REQUIRE(store.Set("here", Bytes("1")).ok());

  Status waited = store.Wait({"here", "missing"}, milliseconds(200));
  CHECK(waited.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(waited.message(), Catch::Contains("g/missing"));
  StatusOr<std::vector<char>> got = store.Get("nope", milliseconds(200));
  CHECK(got.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(got.status().message(), Catch::Contains("g/nope"));

  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(store.get("nope"), gloo::IoException);
  CHECK_THROWS_WITH(store.wait({"nope"}, milliseconds(100)), Catch::Contains("DEADLINE_EXCEEDED"));
  CHECK(std::chrono::steady_clock::now() - start < seconds(3));

  // A round that does not exist (a stale worker) is refused, not waited for.
  GrpcStore stale(client.get(), 7, "g", milliseconds(200));
  CHECK(stale.Set("k", Bytes("v")).code() == StatusCode::kFailedPrecondition);
  // The coordinator gone: Unavailable.
  server->Shutdown(milliseconds(100));
  CHECK(store.Set("k", Bytes("v")).code() == StatusCode::kUnavailable);
}

// What a worker does: Gloo's rendezvous through the coordinator's store (one GrpcStore per rank,
// round 1), then a collective; a rank that never joins is named by its key.
TEST_CASE("GrpcStore bootstraps Gloo; a missing rank is named", "[parallel][grpc_store][gloo]") {
  auto server = StartServer();
  std::vector<std::unique_ptr<launcher::CoordinatorClient>> clients;
  std::vector<std::unique_ptr<GrpcStore>> stores;
  for (int r = 0; r < 2; ++r) {
    clients.push_back(Connect(*server));
    stores.push_back(std::make_unique<GrpcStore>(clients.back().get(), 1, "gloo", seconds(10)));
  }
  auto make = [&](int rank, milliseconds timeout) {
    parallel::GlooOptions options;
    options.rank = rank;
    options.size = 2;
    options.timeout = timeout;
    return parallel::GlooCommunicator::Create(options, stores[rank].get());
  };
  std::future<StatusOr<std::unique_ptr<parallel::GlooCommunicator>>> one =
      std::async(std::launch::async, make, 1, seconds(20));
  auto zero = make(0, seconds(20));
  auto first = one.get();
  REQUIRE(zero.ok());
  REQUIRE(first.ok());
  float a[2] = {1, 2}, b[2] = {10, 20};
  std::future<Status> sum = std::async(std::launch::async, [&] {
    return (*first)->AllReduce(parallel::BufferView(b, 2), parallel::ReduceOp::kSum);
  });
  CHECK((*zero)->AllReduce(parallel::BufferView(a, 2), parallel::ReduceOp::kSum).ok());
  CHECK(sum.get().ok());
  CHECK((a[0] == 11 && a[1] == 22 && b[0] == 11 && b[1] == 22));

  GrpcStore fresh(clients[0].get(), 1, "gloo2", seconds(10));
  parallel::GlooOptions alone;
  alone.size = 2;
  alone.timeout = milliseconds(500);
  Status missing = parallel::GlooCommunicator::Create(alone, &fresh).status();
  INFO(missing.ToString());
  CHECK(missing.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(missing.message(),
             Catch::Contains("missing: gloo2/world/1") && Catch::Contains("rank 1 has not joined"));
}

}  // namespace
}  // namespace ds::launcher
