#include "parallel/comm/nccl/kv_store.h"

namespace ds::parallel {

Status InMemoryKvStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> InMemoryKvStore::Get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
    return DeadlineExceededError("key '" + key + "' not set within " +
                                 std::to_string(timeout.count()) + " ms");
  }
  return values_.at(key);
}

}  // namespace ds::parallel
