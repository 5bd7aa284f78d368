#include "launcher/coordinator/round_kv_store.h"

#include <cerrno>
#include <cstdlib>

namespace ds::launcher {

void RoundKvStore::SetRound(int round) {
  round_ = round;
  entries_.clear();
  bytes_ = 0;
}

Status RoundKvStore::Set(const std::string& key, std::string value) {
  auto it = entries_.find(key);
  size_t old_bytes = it == entries_.end() ? 0 : key.size() + it->second.size();
  size_t new_bytes = bytes_ - old_bytes + key.size() + value.size();
  if (new_bytes > max_bytes_) {
    return ResourceExhaustedError("KV store of round " + std::to_string(round_) + " is full (" +
                                  std::to_string(max_bytes_) + " bytes); cannot set '" + key +
                                  "' (" + std::to_string(value.size()) + " bytes)");
  }
  bytes_ = new_bytes;
  entries_[key] = std::move(value);
  return OkStatus();
}

const std::string* RoundKvStore::Find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> RoundKvStore::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (entries_.count(key) == 0) missing.push_back(key);
  }
  return missing;
}

StatusOr<int64_t> RoundKvStore::Add(const std::string& key, int64_t delta) {
  int64_t current = 0;
  if (const std::string* value = Find(key)) {
    errno = 0;
    char* end = nullptr;
    long long parsed = std::strtoll(value->c_str(), &end, 10);
    if (value->empty() || *end != '\0' || errno == ERANGE) {
      return InvalidArgumentError("KvAdd: key '" + key + "' holds '" + value->substr(0, 32) +
                                  "', not a decimal integer");
    }
    current = parsed;
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return InvalidArgumentError("KvAdd: key '" + key + "' overflows int64");
  }
  Status status = Set(key, std::to_string(sum));
  if (!status.ok()) return status;
  return sum;
}

}  // namespace ds::launcher
