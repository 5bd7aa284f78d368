#include "launcher/state_store/copy_store.h"

#include <limits>

#include "runtime/base/check.h"

namespace ds::launcher {

CopyStore::CopyStore(int keep) : keep_(keep) {
  DS_CHECK(keep >= 1, "CopyStore: keep must be >= 1, got {}", keep);
}

void CopyStore::Add(int rank, int64_t step, std::shared_ptr<const std::string> bytes) {
  DS_CHECK(bytes != nullptr, "CopyStore::Add: null blob for rank {} step {}", rank, step);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = copies_[Key(rank, step)];
  if (slot != nullptr) bytes_ -= static_cast<int64_t>(slot->size());
  bytes_ += static_cast<int64_t>(bytes->size());
  slot = std::move(bytes);

  // The rank's copies are contiguous in the map, in step order: drop from the front.
  auto first = copies_.lower_bound(Key(rank, std::numeric_limits<int64_t>::min()));
  auto end = copies_.upper_bound(Key(rank, std::numeric_limits<int64_t>::max()));
  int held = 0;
  for (auto it = first; it != end; ++it) ++held;
  while (held > keep_) {
    bytes_ -= static_cast<int64_t>(first->second->size());
    first = copies_.erase(first);
    --held;
  }
}

std::shared_ptr<const std::string> CopyStore::Get(int rank, int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find(Key(rank, step));
  return it == copies_.end() ? nullptr : it->second;
}

std::vector<HeldCopy> CopyStore::Held() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HeldCopy> held;
  held.reserve(copies_.size());
  for (const auto& [key, blob] : copies_) {
    held.push_back(HeldCopy{key.first, key.second, static_cast<int64_t>(blob->size())});
  }
  return held;
}

void CopyStore::DropAfter(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = copies_.begin(); it != copies_.end();) {
    if (it->first.second > step) {
      bytes_ -= static_cast<int64_t>(it->second->size());
      it = copies_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t CopyStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ds::launcher
