// GrpcStore: Gloo's rendezvous store (gloo::rendezvous::Store) on the coordinator's KV store,
// so ranks exchange their Gloo addresses through the job's control plane: no shared file
// system, no extra fixed port (Gloo's own sockets listen on port 0).
//
// Keys are "<prefix>/<key>" in KV round `round` (0 = the coordinator's current round), so a
// restarted round never sees the old addresses. Gloo's get() blocks until the key is set (its
// connectFullMesh calls get() without wait()); the store's timeout bounds get() and wait().
//
// Thread-safe (the client is). The Status methods are the API for our code; the Gloo
// overrides throw gloo::IoException with the same text, since the Gloo interface reports
// errors only by throwing: GlooCommunicator catches them at its edge.
//
//   GrpcStore store(client.get(), /*round=*/0, "gloo", std::chrono::seconds(60));
//   DS_ASSIGN_OR_RETURN(auto comm, GlooCommunicator::Create(options, &store));
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

class CoordinatorClient;

class GrpcStore final : public gloo::rendezvous::Store {
 public:
  // `client` is borrowed and must outlive the store.
  GrpcStore(CoordinatorClient* client, int round, std::string prefix,
            std::chrono::milliseconds timeout);

  // Errors keep the client's codes (Unavailable when the coordinator is gone,
  // DeadlineExceeded naming the missing keys, FailedPrecondition for a finished round).
  Status Set(const std::string& key, const std::vector<char>& value);
  // Blocks until `key` is set or `timeout` passes.
  StatusOr<std::vector<char>> Get(const std::string& key, std::chrono::milliseconds timeout);
  // Blocks until every key is set or `timeout` passes.
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::chrono::milliseconds timeout() const { return timeout_; }

  // gloo::rendezvous::Store. Throw gloo::IoException on error.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }

  CoordinatorClient* const client_;
  const int round_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace ds::launcher
