// The backend-independent half of Communicator: argument checks, the FIFO queue run by the
// "ds-comm" thread, handles, and the sticky error.
#include "parallel/comm/communicator.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "parallel/comm/reduce.h"
#include "runtime/base/check.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

namespace {

const char* KindName(const CommOp& op) {
  switch (op.kind) {
    case CommOpKind::kAllReduce:
      return "AllReduce";
    case CommOpKind::kReduceScatter:
      return "ReduceScatter";
    case CommOpKind::kReduceScatterV:
      return "ReduceScatterV";
    case CommOpKind::kAllGather:
      return "AllGather";
    case CommOpKind::kBroadcast:
      return "Broadcast";
    case CommOpKind::kAllToAll:
      return "AllToAll";
    case CommOpKind::kBarrier:
      return "Barrier";
    case CommOpKind::kSendRecv:
      break;
  }
  if (op.src < 0) return "Send";
  return op.dst < 0 ? "Recv" : "SendRecv";
}

std::string Shape(const BufferView& b) {
  return std::string(DTypeName(b.dtype)) + " x " + std::to_string(b.count);
}

// The checks shared by every buffer argument.
Status CheckBuffer(const BufferView& b, const char* what) {
  if (b.count < 0) return InvalidArgumentError(std::string(what) + ": negative count");
  if (b.count > 0 && b.data == nullptr) {
    return InvalidArgumentError(std::string(what) + ": null data with " + Shape(b));
  }
  return OkStatus();
}

// An input and an output buffer of one dtype.
Status CheckPair(const BufferView& in, const BufferView& out) {
  DS_RETURN_IF_ERROR(CheckBuffer(in, "input"));
  DS_RETURN_IF_ERROR(CheckBuffer(out, "output"));
  if (in.dtype != out.dtype) {
    return InvalidArgumentError("input " + Shape(in) + " and output " + Shape(out) +
                                " differ in dtype");
  }
  return OkStatus();
}

Status CheckCounts(const BufferView& in, const BufferView& out, int64_t in_per_out,
                   int64_t out_per_in, const char* rule) {
  DS_RETURN_IF_ERROR(CheckPair(in, out));
  if (in.count * out_per_in != out.count * in_per_out) {
    return InvalidArgumentError(std::string("expected ") + rule + ", got input " + Shape(in) +
                                " and output " + Shape(out));
  }
  return OkStatus();
}

Status CheckReducible(DType dtype) {
  if (CanReduce(dtype)) return OkStatus();
  return UnimplementedError(std::string("reductions over ") + DTypeName(dtype) +
                            " are not implemented");
}

// "250/0/700/50"; long lists (big groups) keep their ends: "8/8/8/8/.../8/8 (64 ranks)".
std::string CountList(const std::vector<int64_t>& counts) {
  constexpr size_t kEnds = 4;
  std::string s;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts.size() > 3 * kEnds && k == kEnds) {
      s += "/...";
      k = counts.size() - kEnds;
    }
    s += (k == 0 ? "" : "/") + std::to_string(counts[k]);
  }
  if (counts.size() > 3 * kEnds) s += " (" + std::to_string(counts.size()) + " ranks)";
  return s;
}

// ReduceScatterV's arguments: `size` counts >= 0 summing to the input count, the output
// holding this rank's chunk.
Status CheckCountList(const BufferView& in, const BufferView& out,
                      const std::vector<int64_t>& counts, int rank, int size) {
  DS_RETURN_IF_ERROR(CheckPair(in, out));
  if (counts.size() != static_cast<size_t>(size)) {
    return InvalidArgumentError("expected " + std::to_string(size) +
                                " counts (one per rank), got " + std::to_string(counts.size()));
  }
  int64_t sum = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] < 0 || counts[k] > INT64_MAX - sum) {
      return InvalidArgumentError("count " + std::to_string(counts[k]) + " of rank " +
                                  std::to_string(k) +
                                  (counts[k] < 0 ? " is negative" : " overflows"));
    }
    sum += counts[k];
  }
  if (in.count != sum || out.count != counts[rank]) {
    return InvalidArgumentError("expected input count = sum of counts " + CountList(counts) +
                                " = " + std::to_string(sum) + " and output count = counts[" +
                                std::to_string(rank) + "] = " + std::to_string(counts[rank]) +
                                ", got input " + Shape(in) + " and output " + Shape(out));
  }
  return OkStatus();
}

Status CheckRank(int r, int size, const char* what) {
  if (r >= 0 && r < size) return OkStatus();
  return InvalidArgumentError(std::string(what) + " " + std::to_string(r) +
                              " is not a rank of a group of " + std::to_string(size));
}

// An operation that never reached the queue: argument errors, sticky errors.
class ReadyHandle final : public CommHandle {
 public:
  explicit ReadyHandle(Status status) : status_(std::move(status)) {}
  Status Wait() override { return status_; }
  bool Done() const override { return true; }

 private:
  const Status status_;
};

}  // namespace

std::string DescribeOp(const CommOp& op) {
  std::string s = KindName(op);
  switch (op.kind) {
    case CommOpKind::kSendRecv:
      if (op.dst >= 0) s += " to rank " + std::to_string(op.dst);
      if (op.src >= 0) s += " from rank " + std::to_string(op.src);
      return s + " (tag " + std::to_string(op.tag) + ", " + Shape(op.dst >= 0 ? op.in : op.out) +
             ")";
    case CommOpKind::kBarrier:
      return s + " #" + std::to_string(op.seq);
    case CommOpKind::kAllReduce:
    case CommOpKind::kReduceScatter:
      return s + " #" + std::to_string(op.seq) + " (" + Shape(op.in) + ", " +
             ReduceOpName(op.reduce) + ")";
    case CommOpKind::kReduceScatterV:
      return s + " #" + std::to_string(op.seq) + " (" + Shape(op.in) + " in, counts " +
             CountList(op.counts) + ", " + ReduceOpName(op.reduce) + ")";
    case CommOpKind::kBroadcast:
      return s + " #" + std::to_string(op.seq) + " (" + Shape(op.in) + ", root " +
             std::to_string(op.root) + ")";
    default:
      return s + " #" + std::to_string(op.seq) + " (" + Shape(op.in) + ")";
  }
}

// The state an async operation shares between the queue and its handle.
struct Communicator::Pending {
  CommOp op;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Status status;      // guarded by mu

  void Complete(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  }
};

class Communicator::QueuedHandle final : public CommHandle {
 public:
  explicit QueuedHandle(std::shared_ptr<Pending> pending) : pending_(std::move(pending)) {}
  ~QueuedHandle() override { Wait().IgnoreError(); }
  Status Wait() override {
    std::unique_lock<std::mutex> lock(pending_->mu);
    pending_->cv.wait(lock, [&] { return pending_->done; });
    return pending_->status;
  }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(pending_->mu);
    return pending_->done;
  }

 private:
  std::shared_ptr<Pending> pending_;
};

Communicator::Communicator(int rank, int size, std::string name)
    : rank_(rank), size_(size), name_(std::move(name)) {
  DS_CHECK(size > 0 && rank >= 0 && rank < size, "bad rank {} of {}", rank, size);
  comm_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ds-comm");
    CommLoop();
  });
}

Communicator::~Communicator() {
  DS_CHECK(!comm_thread_.joinable(), "a Communicator backend did not call StopCommThread()");
}

void Communicator::StopCommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (comm_thread_.joinable()) comm_thread_.join();
}

Status Communicator::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Communicator::CommLoop() {
  for (;;) {
    std::shared_ptr<Pending> next;
    Status sticky;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      if (stopping_) {
        lock.unlock();
        next->Complete(CancelledError("communicator '" + name_ + "' destroyed before " +
                                      DescribeOp(next->op) + " ran"));
        continue;
      }
      busy_ = true;
      sticky = error_;
    }
    Status s = sticky;
    if (s.ok()) s = Run(next->op);
    if (!s.ok()) s = Fail(s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    next->Complete(std::move(s));
  }
}

Status Communicator::Fail(const Status& status) {
  bool first = false;
  Status sticky;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) {
      error_ = status;
      first = true;
    }
    sticky = error_;
  }
  if (first) {
    DS_LOG_ERROR("comm", "communicator '{}' rank {}/{} failed: {}", name_, rank_, size_,
                 sticky.ToString());
    Poison(sticky);
  }
  return sticky;
}

void Communicator::Abort(const std::string& reason) {
  Fail(AbortedError("communicator '" + name_ + "' rank " + std::to_string(rank_) +
                    " aborted: " + reason))
      .IgnoreError();
}

std::unique_ptr<CommHandle> Communicator::Enqueue(CommOp op) {
  auto pending = std::make_shared<Pending>();
  pending->op = std::move(op);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return std::make_unique<ReadyHandle>(error_);
    queue_.push_back(pending);
  }
  cv_.notify_all();
  return std::make_unique<QueuedHandle>(std::move(pending));
}

std::unique_ptr<CommHandle> Communicator::Submit(CommOp op, Status validation) {
  const bool sync = issue_inline_;
  issue_inline_ = false;
  if (!validation.ok()) {
    return std::make_unique<ReadyHandle>(
        validation.WithPrefix(std::string(KindName(op)) + " on '" + name_ + "'"));
  }
  if (op.kind != CommOpKind::kSendRecv) op.seq = next_seq_++;
  if (!sync) return Enqueue(std::move(op));
  bool idle = false;
  {
    // Only this (the issuing) thread queues, so an idle queue stays idle while we run.
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return std::make_unique<ReadyHandle>(error_);
    idle = !busy_ && queue_.empty();
    busy_ = busy_ || idle;
  }
  if (!idle) return Enqueue(std::move(op));
  Status s = Run(op);
  if (!s.ok()) s = Fail(s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  return std::make_unique<ReadyHandle>(std::move(s));
}

std::unique_ptr<CommHandle> Communicator::AllReduceAsync(BufferView data, ReduceOp reduce) {
  CommOp op;
  op.kind = CommOpKind::kAllReduce;
  op.in = op.out = data;
  op.reduce = reduce;
  Status v = CheckBuffer(data, "buffer");
  if (v.ok()) v = CheckReducible(data.dtype);
  return Submit(op, v);
}

std::unique_ptr<CommHandle> Communicator::ReduceScatterAsync(BufferView in, BufferView out,
                                                             ReduceOp reduce) {
  CommOp op;
  op.kind = CommOpKind::kReduceScatter;
  op.in = in;
  op.out = out;
  op.reduce = reduce;
  Status v = CheckCounts(in, out, size_, 1, "input count = size x output count");
  if (v.ok()) v = CheckReducible(in.dtype);
  return Submit(op, v);
}

std::unique_ptr<CommHandle> Communicator::ReduceScatterVAsync(BufferView in, BufferView out,
                                                              std::vector<int64_t> counts,
                                                              ReduceOp reduce) {
  CommOp op;
  op.kind = CommOpKind::kReduceScatterV;
  op.in = in;
  op.out = out;
  op.reduce = reduce;
  Status v = CheckCountList(in, out, counts, rank_, size_);
  if (v.ok()) v = CheckReducible(in.dtype);
  op.counts = std::move(counts);
  return Submit(std::move(op), v);
}

std::unique_ptr<CommHandle> Communicator::AllGatherAsync(BufferView in, BufferView out) {
  CommOp op;
  op.kind = CommOpKind::kAllGather;
  op.in = in;
  op.out = out;
  return Submit(op, CheckCounts(in, out, 1, size_, "output count = size x input count"));
}

std::unique_ptr<CommHandle> Communicator::BroadcastAsync(BufferView data, int root) {
  CommOp op;
  op.kind = CommOpKind::kBroadcast;
  op.in = op.out = data;
  op.root = root;
  Status v = CheckBuffer(data, "buffer");
  if (v.ok()) v = CheckRank(root, size_, "root");
  return Submit(op, v);
}

std::unique_ptr<CommHandle> Communicator::AllToAllAsync(BufferView in, BufferView out) {
  CommOp op;
  op.kind = CommOpKind::kAllToAll;
  op.in = in;
  op.out = out;
  Status v = CheckCounts(in, out, 1, 1, "equal input and output counts");
  if (v.ok() && in.count % size_ != 0) {
    v = InvalidArgumentError("count " + std::to_string(in.count) + " is not a multiple of " +
                             std::to_string(size_) + " ranks");
  }
  return Submit(op, v);
}

std::unique_ptr<CommHandle> Communicator::SendRecvAsync(BufferView send, int dst, BufferView recv,
                                                        int src, int tag) {
  CommOp op;
  op.kind = CommOpKind::kSendRecv;
  op.in = send;
  op.out = recv;
  op.dst = dst;
  op.src = src;
  op.tag = tag;
  Status v;
  if (dst >= 0) v = CheckRank(dst, size_, "destination");
  if (v.ok() && dst >= 0) v = CheckBuffer(send, "send buffer");
  if (v.ok() && src >= 0) v = CheckRank(src, size_, "source");
  if (v.ok() && src >= 0) v = CheckBuffer(recv, "receive buffer");
  if (v.ok() && (dst == rank_ || src == rank_)) {
    v = InvalidArgumentError("a rank cannot send to or receive from itself");
  }
  if (v.ok() && tag < 0) v = InvalidArgumentError("negative tag");
  return Submit(op, v);
}

std::unique_ptr<CommHandle> Communicator::SendAsync(BufferView data, int dst, int tag) {
  return SendRecvAsync(data, dst < 0 ? size_ : dst, BufferView(), -1, tag);
}

std::unique_ptr<CommHandle> Communicator::RecvAsync(BufferView data, int src, int tag) {
  return SendRecvAsync(BufferView(), -1, data, src < 0 ? size_ : src, tag);
}

std::unique_ptr<CommHandle> Communicator::BarrierAsync() {
  CommOp op;
  op.kind = CommOpKind::kBarrier;
  return Submit(op, OkStatus());
}

// The sync variants: the async one through Sync (inline when nothing is pending).
Status Communicator::AllReduce(BufferView data, ReduceOp op) {
  return Sync([&] { return AllReduceAsync(data, op); });
}
Status Communicator::ReduceScatter(BufferView in, BufferView out, ReduceOp op) {
  return Sync([&] { return ReduceScatterAsync(in, out, op); });
}
Status Communicator::ReduceScatterV(BufferView in, BufferView out, std::vector<int64_t> counts,
                                    ReduceOp op) {
  return Sync([&] { return ReduceScatterVAsync(in, out, std::move(counts), op); });
}
Status Communicator::AllGather(BufferView in, BufferView out) {
  return Sync([&] { return AllGatherAsync(in, out); });
}
Status Communicator::Broadcast(BufferView data, int root) {
  return Sync([&] { return BroadcastAsync(data, root); });
}
Status Communicator::AllToAll(BufferView in, BufferView out) {
  return Sync([&] { return AllToAllAsync(in, out); });
}
Status Communicator::Send(BufferView data, int dst, int tag) {
  return Sync([&] { return SendAsync(data, dst, tag); });
}
Status Communicator::Recv(BufferView data, int src, int tag) {
  return Sync([&] { return RecvAsync(data, src, tag); });
}
Status Communicator::SendRecv(BufferView send, int dst, BufferView recv, int src, int tag) {
  return Sync([&] { return SendRecvAsync(send, dst, recv, src, tag); });
}
Status Communicator::Barrier() {
  return Sync([&] { return BarrierAsync(); });
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Split(const std::vector<int>& ranks,
                                                            const std::string& name) {
  const std::string what = "Split '" + name + "' of '" + name_ + "'";
  if (ranks.empty()) return InvalidArgumentError(what + ": no ranks");
  if (name.empty() || name.find('/') != std::string::npos) {
    return InvalidArgumentError(what + ": the name must be non-empty and without '/'");
  }
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    Status v = CheckRank(sorted[i], size_, "member");
    if (!v.ok()) return v.WithPrefix(what);
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return InvalidArgumentError(what + ": rank " + std::to_string(sorted[i]) + " twice");
    }
  }
  DS_RETURN_IF_ERROR(status());
  const uint64_t split_seq = next_split_seq_++;
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) {
    return std::unique_ptr<Communicator>();
  }
  return RunSplit(ranks, name, split_seq);
}

Communicator::SplitChild Communicator::ChildOfSplit(const std::vector<int>& ranks,
                                                    const std::string& name,
                                                    uint64_t split_seq) const {
  SplitChild child;
  child.name = name_ + "/" + name;
  child.size = static_cast<int>(ranks.size());
  child.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  uint32_t h = 2166136261u;  // FNV-1a over the rank list: "3,5,7" -> 8 hex digits
  for (int r : ranks) {
    for (int i = 0; i < 4; ++i)
      h = (h ^ ((static_cast<uint32_t>(r) >> (8 * i)) & 0xff)) * 16777619u;
  }
  char hash[9];
  std::snprintf(hash, sizeof(hash), "%08x", h);
  child.key_prefix = child.name + "#" + std::to_string(split_seq) + "." + hash;
  return child;
}

}  // namespace ds::parallel
