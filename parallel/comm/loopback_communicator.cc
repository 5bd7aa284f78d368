// LoopbackCommunicator: a collective is a meeting in the group's shared state.
//
// Note [Loopback collectives]: each rank's comm thread registers its CommOp in the slot of
// the collective's sequence number (AllReduce also stages a copy of its buffer, which it
// overwrites in place), waits until all ranks arrived, computes its own output by reading the
// peers' inputs directly (every rank reduces in rank order, so all get the same bits), then
// waits until all ranks departed, so that no input is released while a peer still reads it.
// Only the arrival wait can time out or fail: once everyone arrived, the rest is local memory
// work. A rank that fails marks the whole group failed under the mutex before leaving, so a
// late arrival never reads the buffers of a rank that already returned.
#include "parallel/comm/loopback_communicator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <utility>

#include "parallel/comm/reduce.h"
#include "runtime/base/check.h"

namespace ds::parallel {
namespace internal {

struct LoopbackGroup {
  LoopbackGroup(std::string name, int size, std::chrono::milliseconds timeout, bool device_buffers,
                std::function<bool(const void*, size_t)> is_device_memory)
      : name(std::move(name)),
        size(size),
        timeout(timeout),
        device_buffers(device_buffers),
        is_device_memory(std::move(is_device_memory)) {}

  // One collective (Note [Loopback collectives]).
  struct Slot {
    std::vector<const CommOp*> ops;         // by rank; null until that rank arrived
    std::vector<std::vector<char>> staged;  // AllReduce: copies of the inputs, by rank
    int arrived = 0;
    int departed = 0;
  };
  // One Send waiting for its receiver.
  struct Message {
    const CommOp* op;
    bool taken = false;  // the receiver copied the data (or refused it: see status)
    Status status;
  };
  struct PendingSplit {
    std::vector<int> ranks;
    std::shared_ptr<LoopbackGroup> group;
    size_t fetched = 0;
  };

  const std::string name;
  const int size;
  const std::chrono::milliseconds timeout;
  const bool device_buffers;
  const std::function<bool(const void*, size_t)> is_device_memory;

  std::mutex mu;
  std::condition_variable cv;
  Status failure;                                   // guarded by mu; the first failure of any rank
  int failed_rank = -1;                             // guarded by mu
  std::map<uint64_t, std::shared_ptr<Slot>> slots;  // guarded by mu
  std::map<std::tuple<int, int, int>, std::deque<Message*>> boxes;  // (src, dst, tag); mu
  std::map<std::pair<uint64_t, std::string>, PendingSplit> splits;  // guarded by mu

  // What a rank sees when a peer failed.
  Status PeerFailureLocked(const CommOp& op, int rank) const {
    std::string where = DescribeOp(op) + " on '" + name + "' (rank " + std::to_string(rank) + "): ";
    if (failed_rank == rank) return failure;
    if (failure.code() == StatusCode::kAborted) return AbortedError(where + failure.message());
    return UnavailableError(where + "peer rank " + std::to_string(failed_rank) +
                            " failed: " + failure.message());
  }
  void FailLocked(int rank, const Status& status) {
    if (!failure.ok()) return;
    failure = status;
    failed_rank = rank;
    cv.notify_all();
  }
};

}  // namespace internal

using internal::LoopbackGroup;

std::vector<std::unique_ptr<Communicator>> LoopbackCommunicator::CreateGroup(
    int size, const LoopbackOptions& options) {
  DS_CHECK(size >= 1, "LoopbackCommunicator: size {}", size);
  auto group = std::make_shared<LoopbackGroup>(options.name, size, options.timeout,
                                               options.device_buffers, options.is_device_memory);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<LoopbackCommunicator>(group, r));
  return ranks;
}

LoopbackCommunicator::LoopbackCommunicator(std::shared_ptr<LoopbackGroup> group, int rank)
    : Communicator(rank, group->size, group->name), group_(std::move(group)) {}

LoopbackCommunicator::~LoopbackCommunicator() { StopCommThread(); }

bool LoopbackCommunicator::device_buffers() const { return group_->device_buffers; }

void LoopbackCommunicator::Poison(const Status& cause) {
  std::lock_guard<std::mutex> lock(group_->mu);
  group_->FailLocked(rank(), cause);
}

Status LoopbackCommunicator::Run(const CommOp& op) {
  if (group_->device_buffers && group_->is_device_memory)
    for (const BufferView* b : {&op.in, &op.out})
      if (b->data && b->count > 0 &&
          !group_->is_device_memory(b->data, static_cast<size_t>(b->bytes())))
        return InvalidArgumentError(DescribeOp(op) + " on '" + group_->name + "': a buffer of " +
                                    std::to_string(b->bytes()) + " bytes is not device memory");
  return op.kind == CommOpKind::kSendRecv ? RunSendRecv(op) : RunCollective(op);
}

namespace {

// ReduceScatterV's outputs differ by rank; its counts must not.
bool SameShape(const CommOp& a, const CommOp& b) {
  return a.kind == b.kind && a.in.count == b.in.count && a.in.dtype == b.in.dtype &&
         (a.kind == CommOpKind::kReduceScatterV || a.out.count == b.out.count) &&
         a.counts == b.counts && a.reduce == b.reduce && a.root == b.root;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

char* At(const BufferView& b, int64_t byte_offset) {
  return static_cast<char*>(b.data) + byte_offset;
}

}  // namespace

Status LoopbackCommunicator::RunCollective(const CommOp& op) {
  LoopbackGroup& g = *group_;
  const int r = rank();
  const std::string where =
      DescribeOp(op) + " on '" + g.name + "' (rank " + std::to_string(r) + ")";
  std::vector<char> staged;
  if (op.kind == CommOpKind::kAllReduce) {
    staged.assign(static_cast<const char*>(op.in.data),
                  static_cast<const char*>(op.in.data) + op.in.bytes());
  }
  const auto deadline = std::chrono::steady_clock::now() + g.timeout;

  std::unique_lock<std::mutex> lock(g.mu);
  if (!g.failure.ok()) return g.PeerFailureLocked(op, r);
  std::shared_ptr<LoopbackGroup::Slot>& entry = g.slots[op.seq];
  if (!entry) {
    entry = std::make_shared<LoopbackGroup::Slot>();
    entry->ops.assign(g.size, nullptr);
    entry->staged.resize(g.size);
  }
  std::shared_ptr<LoopbackGroup::Slot> slot = entry;
  for (int k = 0; k < g.size; ++k) {
    if (slot->ops[k] != nullptr && !SameShape(*slot->ops[k], op)) {
      Status mismatch = FailedPreconditionError(where + ": rank " + std::to_string(k) + " issued " +
                                                DescribeOp(*slot->ops[k]) + " instead");
      g.FailLocked(r, mismatch);
      return mismatch;
    }
  }
  slot->ops[r] = &op;
  slot->staged[r] = std::move(staged);
  if (++slot->arrived == g.size) g.cv.notify_all();
  const bool all =
      g.cv.wait_until(lock, deadline, [&] { return slot->arrived == g.size || !g.failure.ok(); });
  if (slot->arrived < g.size) {
    if (!g.failure.ok()) return g.PeerFailureLocked(op, r);
    DS_CHECK(!all, "woke without a reason");
    std::vector<int> missing;
    for (int k = 0; k < g.size; ++k) {
      if (slot->ops[k] == nullptr) missing.push_back(k);
    }
    Status timeout = DeadlineExceededError(
        where + ": timed out after " + std::to_string(g.timeout.count()) + " ms waiting for rank" +
        (missing.size() > 1 ? "s " : " ") + RankList(missing));
    g.FailLocked(r, timeout);
    return timeout;
  }
  lock.unlock();
  Compute(op, slot->ops, slot->staged);
  lock.lock();
  if (++slot->departed == g.size) {
    g.slots.erase(op.seq);
    g.cv.notify_all();
  } else {
    g.cv.wait(lock, [&] { return slot->departed == g.size; });
  }
  return OkStatus();
}

void LoopbackCommunicator::Compute(const CommOp& op, const std::vector<const CommOp*>& all,
                                   const std::vector<std::vector<char>>& staged) {
  const int r = rank();
  const int n = size();
  switch (op.kind) {
    case CommOpKind::kAllReduce:
      std::memcpy(op.in.data, staged[0].data(), op.in.bytes());
      for (int k = 1; k < n; ++k) {
        ReduceInto(op.in.data, staged[k].data(), op.in.count, op.in.dtype, op.reduce);
      }
      return;
    case CommOpKind::kReduceScatter: {
      const int64_t chunk = op.out.bytes();
      std::memcpy(op.out.data, At(all[0]->in, r * chunk), chunk);
      for (int k = 1; k < n; ++k) {
        ReduceInto(op.out.data, At(all[k]->in, r * chunk), op.out.count, op.out.dtype, op.reduce);
      }
      return;
    }
    case CommOpKind::kReduceScatterV: {
      if (op.out.count == 0) return;
      int64_t offset = 0;  // elements before chunk r
      for (int k = 0; k < r; ++k) offset += op.counts[k];
      const int64_t at = offset * static_cast<int64_t>(DTypeSize(op.in.dtype));
      std::memcpy(op.out.data, At(all[0]->in, at), op.out.bytes());
      for (int k = 1; k < n; ++k) {
        ReduceInto(op.out.data, At(all[k]->in, at), op.out.count, op.out.dtype, op.reduce);
      }
      return;
    }
    case CommOpKind::kAllGather: {
      const int64_t chunk = op.in.bytes();
      for (int k = 0; k < n; ++k) std::memcpy(At(op.out, k * chunk), all[k]->in.data, chunk);
      return;
    }
    case CommOpKind::kBroadcast:
      if (r != op.root) std::memcpy(op.in.data, all[op.root]->in.data, op.in.bytes());
      return;
    case CommOpKind::kAllToAll: {
      const int64_t chunk = op.in.bytes() / n;
      for (int k = 0; k < n; ++k) {
        std::memcpy(At(op.out, k * chunk), At(all[k]->in, r * chunk), chunk);
      }
      return;
    }
    case CommOpKind::kBarrier:
    case CommOpKind::kSendRecv:
      return;
  }
}

namespace {

// The receive side of a send / receive pair (g.mu held): copies message m into op's output, or
// fails both ends when the sizes or dtypes disagree; m is marked taken and its sender woken.
Status Take(LoopbackGroup& g, LoopbackGroup::Message* m, const CommOp& op,
            const std::string& where) {
  Status received;
  const BufferView& from = m->op->in;
  if (from.dtype != op.out.dtype || from.count != op.out.count) {
    m->status = FailedPreconditionError(DescribeOp(*m->op) + " on '" + g.name +
                                        "': the receiver expected " + DescribeOp(op));
    received = FailedPreconditionError(where + ": the sender sent " + DescribeOp(*m->op));
  } else {
    std::memcpy(op.out.data, from.data, from.bytes());
  }
  m->taken = true;
  g.cv.notify_all();
  return received;
}

}  // namespace

Status LoopbackCommunicator::RunSendRecv(const CommOp& op) {
  LoopbackGroup& g = *group_;
  const int r = rank();
  const std::string where =
      DescribeOp(op) + " on '" + g.name + "' (rank " + std::to_string(r) + ")";
  const auto deadline = std::chrono::steady_clock::now() + g.timeout;
  const auto timed_out = [&](int peer) {
    return DeadlineExceededError(where + ": timed out after " + std::to_string(g.timeout.count()) +
                                 " ms waiting for rank " + std::to_string(peer));
  };

  std::unique_lock<std::mutex> lock(g.mu);
  if (!g.failure.ok()) return g.PeerFailureLocked(op, r);
  LoopbackGroup::Message sent{&op};
  const auto out_key = std::make_tuple(r, op.dst, op.tag);
  if (op.dst >= 0) {
    g.boxes[out_key].push_back(&sent);
    g.cv.notify_all();
  }
  // Every exit below takes an untaken `sent` back out of its box first: a receiver must never
  // read the buffer of a Send that already returned.
  const auto withdraw = [&] {
    if (op.dst < 0 || sent.taken) return;
    auto it = g.boxes.find(out_key);
    it->second.erase(std::find(it->second.begin(), it->second.end(), &sent));
    if (it->second.empty()) g.boxes.erase(it);
  };

  Status received;
  if (op.src >= 0) {
    const auto in_key = std::make_tuple(op.src, r, op.tag);
    g.cv.wait_until(lock, deadline, [&] { return g.boxes.count(in_key) || !g.failure.ok(); });
    auto it = g.boxes.find(in_key);
    if (it == g.boxes.end()) {
      withdraw();
      if (!g.failure.ok()) return g.PeerFailureLocked(op, r);
      Status timeout = timed_out(op.src);
      g.FailLocked(r, timeout);
      return timeout;
    }
    LoopbackGroup::Message* m = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) g.boxes.erase(it);
    received = Take(g, m, op, where);
  }
  if (op.dst >= 0) {
    g.cv.wait_until(lock, deadline, [&] { return sent.taken || !g.failure.ok(); });
    if (!sent.taken) {
      withdraw();
      if (!g.failure.ok()) return g.PeerFailureLocked(op, r);
      Status timeout = timed_out(op.dst);
      g.FailLocked(r, timeout);
      return timeout;
    }
    if (!sent.status.ok()) return sent.status;
  }
  return received;
}

StatusOr<std::unique_ptr<Communicator>> LoopbackCommunicator::RunSplit(
    const std::vector<int>& ranks, const std::string& name, uint64_t split_seq) {
  LoopbackGroup& g = *group_;
  std::lock_guard<std::mutex> lock(g.mu);
  const auto key = std::make_pair(split_seq, name);
  LoopbackGroup::PendingSplit& pending = g.splits[key];
  if (!pending.group) {
    pending.ranks = ranks;
    pending.group =
        std::make_shared<LoopbackGroup>(g.name + "/" + name, static_cast<int>(ranks.size()),
                                        g.timeout, g.device_buffers, g.is_device_memory);
  } else if (pending.ranks != ranks) {
    return InvalidArgumentError("Split '" + name + "' of '" + g.name + "': rank " +
                                std::to_string(rank()) + " passed ranks [" + RankList(ranks) +
                                "], another member [" + RankList(pending.ranks) + "]");
  }
  const int new_rank =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
  std::shared_ptr<LoopbackGroup> child = pending.group;
  if (++pending.fetched == ranks.size()) g.splits.erase(key);
  return std::unique_ptr<Communicator>(new LoopbackCommunicator(std::move(child), new_rank));
}

}  // namespace ds::parallel
