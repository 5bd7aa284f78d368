// The key-value store of one rendezvous round (collective bootstrap: Gloo, NCCL ids).
// Keys live in exactly one round: SetRound() drops everything of the previous round, so a
// stale worker cannot read or poison the keys of the next one (torch prefixes its store
// with the round for the same reason). Bounded in bytes.
//
// Not thread-safe: CoordinatorState owns one and guards it with its mutex; the blocking
// waits (KvGet with a timeout, KvWait) live there too.
//
//   RoundKvStore kv(/*max_bytes=*/64 << 20);
//   kv.SetRound(1);
//   DS_RETURN_IF_ERROR(kv.Set("nccl_id", id));
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

class RoundKvStore {
 public:
  explicit RoundKvStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  int round() const { return round_; }
  // Starts `round` with an empty store.
  void SetRound(int round);

  // ResourceExhausted when the store would grow past max_bytes.
  Status Set(const std::string& key, std::string value);
  // Null when the key is not set. The pointer is valid until the next mutation.
  const std::string* Find(const std::string& key) const;
  // The keys of `keys` that are not set, in the given order.
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;
  // Adds `delta` to the decimal integer stored at `key` (absent = 0) and returns the sum.
  // InvalidArgument when the stored value is not a decimal integer or the sum overflows.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);

  size_t bytes() const { return bytes_; }

 private:
  const size_t max_bytes_;
  int round_ = 0;
  size_t bytes_ = 0;  // keys plus values
  std::map<std::string, std::string> entries_;
};

}  // namespace ds::launcher
