// CopyStore alone, then StateStoreServer + StateStoreClient over real gRPC on 127.0.0.1
// (port 0). Malformed Put streams are sent through the generated stub directly.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <random>

#include "launcher/state_store/copy_store.h"
#include "launcher/state_store/state_store_client.h"
#include "launcher/state_store/state_store_server.h"
#include "proto/state_store.grpc.pb.h"
#include "runtime/base/crc32c.h"

namespace ds::launcher {
namespace {

using std::chrono::seconds;

constexpr char kToken[] = "s3cret-token";

std::shared_ptr<const std::string> Blob(size_t n, char fill) {
  return std::make_shared<const std::string>(n, fill);
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(rng() & 0xff);
  return bytes;
}

std::vector<std::pair<int, int64_t>> Keys(const std::vector<HeldCopy>& held) {
  std::vector<std::pair<int, int64_t>> keys;
  for (const HeldCopy& copy : held) keys.emplace_back(copy.rank, copy.step);
  return keys;
}

TEST_CASE("CopyStore: keep, replace, DropAfter, Held, bytes", "[launcher][state_store]") {
  CopyStore store(/*keep=*/2);
  REQUIRE(store.Get(0, 10) == nullptr);
  store.Add(1, 10, Blob(100, 'a'));
  store.Add(0, 10, Blob(10, 'b'));
  store.Add(0, 20, Blob(20, 'c'));
  REQUIRE(store.bytes() == 130);

  SECTION("a third copy drops the rank's oldest only") {
    std::shared_ptr<const std::string> old = store.Get(0, 10);
    store.Add(0, 30, Blob(30, 'd'));
    REQUIRE(Keys(store.Held()) == std::vector<std::pair<int, int64_t>>{{0, 20}, {0, 30}, {1, 10}});
    REQUIRE(store.Get(0, 10) == nullptr);
    REQUIRE(*old == std::string(10, 'b'));  // a holder keeps a dropped blob alive
    REQUIRE(store.bytes() == 150);
  }
  SECTION("a copy older than keep held ones is dropped at once") {
    store.Add(0, 5, Blob(5, 'e'));
    REQUIRE(Keys(store.Held()) == std::vector<std::pair<int, int64_t>>{{0, 10}, {0, 20}, {1, 10}});
    REQUIRE(store.bytes() == 130);
  }
  SECTION("the same (rank, step) replaces") {
    store.Add(0, 20, Blob(7, 'f'));
    REQUIRE(*store.Get(0, 20) == std::string(7, 'f'));
    REQUIRE(store.Held().size() == 3);
    REQUIRE(store.bytes() == 117);
  }
  SECTION("Held reports sizes, sorted by (rank, step)") {
    const std::vector<HeldCopy> held = store.Held();
    REQUIRE(held.size() == 3);
    REQUIRE((held[0].rank == 0 && held[0].step == 10 && held[0].bytes == 10));
    REQUIRE((held[1].rank == 0 && held[1].step == 20 && held[1].bytes == 20));
    REQUIRE((held[2].rank == 1 && held[2].step == 10 && held[2].bytes == 100));
  }
  SECTION("DropAfter removes later steps of every rank; -1 removes all") {
    store.DropAfter(15);
    REQUIRE(Keys(store.Held()) == std::vector<std::pair<int, int64_t>>{{0, 10}, {1, 10}});
    REQUIRE(store.bytes() == 110);
    store.DropAfter(10);
    REQUIRE(store.Held().size() == 2);
    store.DropAfter(-1);
    REQUIRE(store.Held().empty());
    REQUIRE(store.bytes() == 0);
  }
}

// A server on 127.0.0.1 over its own CopyStore (keep 2).
struct Fixture {
  Fixture() {
    StatusOr<std::unique_ptr<StateStoreServer>> started =
        StateStoreServer::Start("127.0.0.1", 0, kToken, &store);
    REQUIRE(started.ok());
    server = std::move(started).value();
    REQUIRE(server->port() > 0);
    address = "127.0.0.1:" + std::to_string(server->port());
  }

  CopyStore store{2};
  std::unique_ptr<StateStoreServer> server;
  std::string address;
};

TEST_CASE("StateStore: Put then Get returns the same bytes", "[launcher][state_store]") {
  Fixture f;
  StateStoreClient client(f.address, kToken);
  const std::string blob = RandomBytes(5 << 20, 42);
  REQUIRE(client.Put(3, 100, blob.data(), blob.size(), seconds(20)).ok());
  REQUIRE(f.store.bytes() == static_cast<int64_t>(blob.size()));

  StatusOr<std::string> back = client.Get(3, 100, seconds(20));
  REQUIRE(back.ok());
  REQUIRE(back->size() == blob.size());
  REQUIRE(*back == blob);

  SECTION("an empty copy round-trips too") {
    REQUIRE(client.Put(4, 7, nullptr, 0, seconds(5)).ok());
    StatusOr<std::string> empty = client.Get(4, 7, seconds(5));
    REQUIRE(empty.ok());
    REQUIRE(empty->empty());
  }
  SECTION("List reports what is held; keep applies per rank") {
    const std::string small = RandomBytes(1000, 7);
    for (int64_t step : {110, 120}) {
      REQUIRE(client.Put(3, step, small.data(), small.size(), seconds(5)).ok());
    }
    REQUIRE(client.Put(5, 110, small.data(), small.size(), seconds(5)).ok());
    StatusOr<std::vector<HeldCopy>> held = client.List(seconds(5));
    REQUIRE(held.ok());
    REQUIRE(Keys(*held) == std::vector<std::pair<int, int64_t>>{{3, 110}, {3, 120}, {5, 110}});
    REQUIRE((*held)[0].bytes == 1000);
  }
}

TEST_CASE("StateStore: Get of a copy not held is NOT_FOUND", "[launcher][state_store]") {
  Fixture f;
  StateStoreClient client(f.address, kToken);
  StatusOr<std::string> missing = client.Get(7, 42, seconds(5));
  REQUIRE(missing.status().code() == StatusCode::kNotFound);
  const std::string& message = missing.status().message();
  REQUIRE(message.find("rank 7") != std::string::npos);
  REQUIRE(message.find("step 42") != std::string::npos);
  REQUIRE(message.find(f.address) != std::string::npos);
}

TEST_CASE("StateStore: a wrong token is UNAUTHENTICATED", "[launcher][state_store]") {
  Fixture f;
  StateStoreClient client(f.address, "not-the-token");
  const std::string blob = RandomBytes(3 << 20, 1);
  Status put = client.Put(0, 10, blob.data(), blob.size(), seconds(5));
  REQUIRE(put.code() == StatusCode::kUnauthenticated);
  REQUIRE(f.store.Held().empty());
  REQUIRE(client.Get(0, 10, seconds(5)).status().code() == StatusCode::kUnauthenticated);
  REQUIRE(client.List(seconds(5)).status().code() == StatusCode::kUnauthenticated);
}

// Sends `chunks` as one Put stream through the generated stub; returns the call's status.
grpc::Status RawPut(const std::string& address, const std::vector<proto::CopyChunk>& chunks) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = proto::StateStore::NewStub(channel);
  grpc::ClientContext context;
  context.AddMetadata("ds-job-token", kToken);
  context.set_deadline(std::chrono::system_clock::now() + seconds(5));
  proto::PutReply reply;
  auto writer = stub->Put(&context, &reply);
  for (const proto::CopyChunk& chunk : chunks) {
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST_CASE("StateStore: a malformed Put is refused and stores nothing", "[launcher][state_store]") {
  Fixture f;
  const std::string blob = RandomBytes(3 << 20, 9);
  proto::CopyChunk first;
  first.set_rank(2);
  first.set_step(50);
  first.set_total_bytes(static_cast<int64_t>(blob.size()));
  first.set_crc32c(Crc32c(blob.data(), blob.size()));
  first.set_data(blob.substr(0, 1 << 20));
  proto::CopyChunk second;
  second.set_data(blob.substr(1 << 20, 1 << 20));

  SECTION("the stream ends early") {
    grpc::Status status = RawPut(f.address, {first, second});
    REQUIRE(status.error_code() == grpc::StatusCode::DATA_LOSS);
    REQUIRE(status.error_message().find("rank 2 step 50") != std::string::npos);
  }
  SECTION("the CRC32C does not match") {
    first.set_crc32c(first.crc32c() ^ 1);
    proto::CopyChunk third;
    third.set_data(blob.substr(2 << 20));
    grpc::Status status = RawPut(f.address, {first, second, third});
    REQUIRE(status.error_code() == grpc::StatusCode::DATA_LOSS);
    REQUIRE(status.error_message().find("CRC32C") != std::string::npos);
  }
  SECTION("more bytes than total_bytes") {
    first.set_total_bytes(1 << 20);
    grpc::Status status = RawPut(f.address, {first, second});
    REQUIRE(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("an empty stream") {
    REQUIRE(RawPut(f.address, {}).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  REQUIRE(f.store.Held().empty());
  REQUIRE(f.store.bytes() == 0);
  StateStoreClient client(f.address, kToken);
  REQUIRE(client.Get(2, 50, seconds(5)).status().code() == StatusCode::kNotFound);
}

TEST_CASE("StateStoreServer: bad arguments and Shutdown", "[launcher][state_store]") {
  CopyStore store;
  REQUIRE(StateStoreServer::Start("127.0.0.1", 0, "", &store).status().code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(StateStoreServer::Start("127.0.0.1", 0, kToken, nullptr).status().code() ==
          StatusCode::kInvalidArgument);
  REQUIRE(StateStoreServer::Start("127.0.0.1", 70000, kToken, &store).status().code() ==
          StatusCode::kInvalidArgument);

  Fixture f;
  f.server->Shutdown();
  f.server->Shutdown();  // idempotent
  StateStoreClient client(f.address, kToken);
  REQUIRE(client.List(seconds(2)).status().code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ds::launcher
