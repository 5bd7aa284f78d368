// StateStoreClient: a connection to one agent's StateStoreServer (proto/state_store.proto),
// used by a worker to push copies of its rank's state (Put) and to fetch one back after a
// restart (Get). Every call carries the job token and a deadline; errors keep gRPC's code
// (same numbers as StatusCode) and read "StateStore.Get(10.0.0.2:7000, rank 3 step 1200):
// <message>". Data is checked end to end: Put sends the CRC-32C of the whole blob, Get
// checks the size and CRC-32C of what arrived. No gRPC in this header.
//
// Thread-safe: one client may be shared by threads (one HTTP/2 channel underneath). The
// constructor does not connect; the first call does (UNAVAILABLE if nobody listens).
//
//   StateStoreClient client("10.0.0.2:7000", token);
//   DS_RETURN_IF_ERROR(client.Put(rank, step, blob.data(), blob.size(), seconds(30)));
//   DS_ASSIGN_OR_RETURN(std::string state, client.Get(rank, step, seconds(30)));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/state_store/copy_store.h"
#include "runtime/base/status.h"

namespace ds::launcher {

class StateStoreClient {
 public:
  // `address`: host:port of the server; `token`: the job token.
  StateStoreClient(std::string address, std::string token);
  ~StateStoreClient();

  StateStoreClient(const StateStoreClient&) = delete;
  StateStoreClient& operator=(const StateStoreClient&) = delete;

  const std::string& address() const;

  // Sends the n bytes at `data` as the copy of (rank, step), in 1 MiB chunks; blocks until
  // the server stored it or refused it, up to `timeout` for the whole transfer. `data` is
  // only read, and not kept after the call. InvalidArgument for a negative rank or step;
  // ResourceExhausted above kMaxCopyBytes; otherwise the server's status (see
  // proto/state_store.proto) or the transport's (Unavailable, DeadlineExceeded).
  Status Put(int rank, int64_t step, const char* data, size_t n, std::chrono::milliseconds timeout);
  // The copy of (rank, step). NotFound when the server holds none; DataLoss when the bytes
  // that arrived do not match the size or CRC-32C the server sent.
  StatusOr<std::string> Get(int rank, int64_t step, std::chrono::milliseconds timeout);
  // The copies the server holds, sorted by (rank, step).
  StatusOr<std::vector<HeldCopy>> List(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::launcher
