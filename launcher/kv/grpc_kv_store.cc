#include "launcher/kv/grpc_kv_store.h"

#include <vector>

namespace ds::launcher {

Status GrpcKvStore::Set(const std::string& key, const std::string& value) {
  return store_->Set(key, std::vector<char>(value.begin(), value.end()));
}

StatusOr<std::string> GrpcKvStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  StatusOr<std::vector<char>> value = store_->Get(key, timeout);
  if (!value.ok()) return value.status();
  return std::string(value->begin(), value->end());
}

}  // namespace ds::launcher
