// CollectiveQueue: the collectives (and swaps) of one step that are in flight, by instruction
// index. A job is a communicator handle (or a wait) and the step that moves its result where it
// belongs; a sync instruction waits at once, an async one when a later instruction's wait_for
// names it (the plan places every wait, and releases the job's staging there).
//
// Not thread-safe; the step runner's thread drives it.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"

namespace ds::zero {

struct CollectiveJob {
  std::unique_ptr<parallel::CommHandle> handle;  // null: nothing to wait for
  std::function<Status()> wait;                  // or this waits (an NVMe swap's transfer)
  std::function<Status()> finish;                // after completion; may be empty
};

class CollectiveQueue {
 public:
  // Starts tracking instruction `index`'s job; without a handle, or not `async`, it completes
  // here. The first error of the wait or the finish step is returned.
  Status Track(int index, bool async, CollectiveJob job);
  // Completes every job of instruction `index` (none: OK).
  Status WaitFor(int index);
  // Completes everything in flight (also after an error: no operation may outlive its staging).
  Status WaitAll();
  bool empty() const { return pending_.empty(); }

 private:
  std::multimap<int, CollectiveJob> pending_;
};

}  // namespace ds::zero
