#include "launcher/kv/grpc_store.h"

#include <gloo/common/error.h>

#include "launcher/coordinator/coordinator_client.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

[[noreturn]] void Throw(const Status& status) {
  throw gloo::IoException("GrpcStore: " + status.ToString());
}

}  // namespace

GrpcStore::GrpcStore(CoordinatorClient* client, int round, std::string prefix,
                     std::chrono::milliseconds timeout)
    : client_(client), round_(round), prefix_(std::move(prefix)), timeout_(timeout) {}

Status GrpcStore::Set(const std::string& key, const std::vector<char>& value) {
  return client_->KvSet(round_, Key(key), std::string(value.begin(), value.end()));
}

StatusOr<std::vector<char>> GrpcStore::Get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  DS_ASSIGN_OR_RETURN(std::string value, client_->KvGet(round_, Key(key), timeout));
  return std::vector<char>(value.begin(), value.end());
}

Status GrpcStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(Key(key));
  return client_->KvWait(round_, full, timeout);
}

void GrpcStore::set(const std::string& key, const std::vector<char>& data) {
  Status s = Set(key, data);
  if (!s.ok()) Throw(s);
}

std::vector<char> GrpcStore::get(const std::string& key) {
  StatusOr<std::vector<char>> value = Get(key, timeout_);
  if (!value.ok()) Throw(value.status());
  return std::move(value).value();
}

void GrpcStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GrpcStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Status s = Wait(keys, timeout);
  if (!s.ok()) Throw(s);
}

}  // namespace ds::launcher
