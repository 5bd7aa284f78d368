// GrpcKvStore: parallel::KvStore over GrpcStore, i.e. the coordinator's KV store, so a
// launched job's ranks exchange the NCCL unique id through the control plane (keys get the
// GrpcStore's prefix and round, see grpc_store.h).
//
// Thread-safe (GrpcStore is). The GrpcStore is borrowed and must outlive this object.
//
//   GrpcStore grpc(client, /*round=*/0, "nccl", std::chrono::seconds(60));
//   GrpcKvStore store(&grpc);
//   DS_ASSIGN_OR_RETURN(auto comm, NcclCommunicator::Create(options, &store));
#pragma once

#include "launcher/kv/grpc_store.h"
#include "parallel/comm/nccl/kv_store.h"

namespace ds::launcher {

class GrpcKvStore final : public parallel::KvStore {
 public:
  explicit GrpcKvStore(GrpcStore* store) : store_(store) {}
  // Errors keep GrpcStore's codes (Unavailable: coordinator gone; DeadlineExceeded).
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  GrpcStore* const store_;
};

}  // namespace ds::launcher
