// KvStore: the small key-value interface NcclCommunicator bootstraps through (rank 0 publishes
// the NCCL unique id, the others read it). Implementations: InMemoryKvStore (this file, for
// ranks as threads in one process and tests) and GrpcKvStore (grpc_kv_store.h, the
// coordinator's KV store).
//
// Thread-safe: implementations must allow concurrent calls from several threads.
//
//   InMemoryKvStore store;
//   DS_RETURN_IF_ERROR(store.Set("world/nccl-id", bytes));
//   DS_ASSIGN_OR_RETURN(std::string id, store.Get("world/nccl-id", std::chrono::seconds(60)));
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "runtime/base/status.h"

namespace ds::parallel {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Stores `value` (any bytes) under `key`, replacing an earlier value.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` is set or `timeout` passed: DeadlineExceeded naming the key.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

class InMemoryKvStore final : public KvStore {
 public:
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;  // guarded by mu_
};

}  // namespace ds::parallel
