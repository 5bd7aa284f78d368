// StateStoreServer: the gRPC server of a node's in-memory checkpoints (the StateStore
// service of proto/state_store.proto) over a CopyStore. The agent runs one; workers push
// copies of their rank's state to it (Put) and fetch them back after a restart (Get).
// A copy is stored only when all its bytes arrived and their CRC-32C matches; a refused
// copy is logged once (subsystem "store") and leaves the store as it was. Every call must
// carry the job token in the metadata "ds-job-token" (else UNAUTHENTICATED). Plaintext.
//
// Thread-safe. gRPC runs the handlers on its own threads; the store is borrowed and must
// outlive the server. The destructor calls Shutdown().
//
//   CopyStore store(/*keep=*/2);
//   DS_ASSIGN_OR_RETURN(auto server, StateStoreServer::Start("0.0.0.0", 0, token, &store));
//   // advertise server->port() to the workers, then at the end:
//   server->Shutdown();
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "launcher/state_store/copy_store.h"
#include "runtime/base/status.h"

namespace ds::launcher {

class StateStoreServer {
 public:
  // Listens on bind_host:port (port 0 = a free port, see port(); an IPv6 host may be given
  // with or without brackets). InvalidArgument for an empty token, a null store or a port
  // outside 0..65535; Unavailable when the address cannot be bound.
  static StatusOr<std::unique_ptr<StateStoreServer>> Start(const std::string& bind_host, int port,
                                                           std::string token, CopyStore* store);
  ~StateStoreServer();

  StateStoreServer(const StateStoreServer&) = delete;
  StateStoreServer& operator=(const StateStoreServer&) = delete;

  // The port actually bound.
  int port() const;
  // Stops serving: in-flight calls get `grace` to finish, then are cancelled (a Put cut
  // short stores nothing). Returns once every handler has returned. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

 private:
  struct Impl;
  explicit StateStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::launcher
