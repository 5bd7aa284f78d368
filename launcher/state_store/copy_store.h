// CopyStore: the in-memory checkpoints an agent holds, as opaque blobs keyed by
// (rank, step). A worker pushes a copy of its rank's state every few steps (through
// StateStoreServer); a restarted worker fetches the copy of the step it resumes from.
// At most `keep` complete copies are kept per rank: adding one drops that rank's oldest.
//
// Thread-safe: one mutex guards the map. Blobs are shared_ptr<const std::string> so that a
// Get streaming a copy out keeps it alive while Add or DropAfter drop it from the store;
// the bytes are never modified after Add.
//
//   CopyStore store(/*keep=*/2);
//   store.Add(3, 1200, std::make_shared<const std::string>(std::move(blob)));
//   std::shared_ptr<const std::string> copy = store.Get(3, 1200);  // nullptr if absent
//   store.DropAfter(1200);  // a restart resumed from step 1200: later copies are stale
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ds::launcher {

// Limits of one copy on the wire, shared by StateStoreServer and StateStoreClient.
inline constexpr size_t kCopyChunkBytes = size_t{1} << 20;   // data per CopyChunk
inline constexpr int64_t kMaxCopyBytes = int64_t{16} << 30;  // largest copy a server accepts

// One copy held, as List reports it.
struct HeldCopy {
  int rank = 0;
  int64_t step = 0;
  int64_t bytes = 0;  // size of the blob
};

class CopyStore {
 public:
  // `keep`: complete copies kept per rank (the newest steps); must be >= 1.
  explicit CopyStore(int keep = 2);

  CopyStore(const CopyStore&) = delete;
  CopyStore& operator=(const CopyStore&) = delete;

  // Stores `bytes` (not null) as the copy of (rank, step), replacing an existing one, then
  // drops the rank's copies with the lowest steps beyond `keep` (the new copy itself, when
  // its step is older than `keep` held ones).
  void Add(int rank, int64_t step, std::shared_ptr<const std::string> bytes);
  // The copy of (rank, step), or nullptr when none is held. The blob stays valid as long as
  // the caller holds it, whatever the store does meanwhile.
  std::shared_ptr<const std::string> Get(int rank, int64_t step) const;
  // Every copy held, sorted by (rank, step).
  std::vector<HeldCopy> Held() const;
  // Removes every copy with a step greater than `step`: a restart resumed from `step`, and
  // later copies belong to an abandoned timeline. DropAfter(-1) removes all.
  void DropAfter(int64_t step);
  // Total size of the blobs held.
  int64_t bytes() const;
  int keep() const { return keep_; }

 private:
  using Key = std::pair<int, int64_t>;  // (rank, step)

  const int keep_;

  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<const std::string>> copies_;  // guarded by mu_
  int64_t bytes_ = 0;                                         // guarded by mu_
};

}  // namespace ds::launcher
