#include "zero/collective_queue.h"

#include "runtime/base/status_macros.h"

namespace ds::zero {
namespace {

Status Complete(CollectiveJob& job) {
  if (job.handle) DS_RETURN_IF_ERROR(job.handle->Wait());
  if (job.wait) DS_RETURN_IF_ERROR(job.wait());
  return job.finish ? job.finish() : OkStatus();
}

}  // namespace

Status CollectiveQueue::Track(int index, bool async, CollectiveJob job) {
  if ((!job.handle && !job.wait) || !async) return Complete(job);
  pending_.emplace(index, std::move(job));
  return OkStatus();
}

Status CollectiveQueue::WaitFor(int index) {
  auto [first, last] = pending_.equal_range(index);
  Status status;
  for (auto it = first; it != last; ++it) {
    Status s = Complete(it->second);
    if (status.ok()) status = s;
  }
  pending_.erase(first, last);
  return status;
}

Status CollectiveQueue::WaitAll() {
  Status status;
  while (!pending_.empty()) {
    Status s = WaitFor(pending_.begin()->first);
    if (status.ok()) status = s;
  }
  return status;
}

}  // namespace ds::zero
