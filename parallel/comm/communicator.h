// Communicator: collectives and point-to-point transfers among the ranks of a group (the
// data-parallel world, or a process group made with Split) for gradient buckets and ZeRO
// partitions. Backends: LoopbackCommunicator (ranks as threads, for tests) and
// GlooCommunicator (TCP).
//
// Thread safety: thread-compatible. One thread issues a communicator's operations, and every
// rank of the group issues the same collectives in the same order with the same sizes.
// rank(), size(), name(), status() and Abort() may be called from any thread.
//
// Ordering: operations run one at a time, in issue order (FIFO). An async variant queues the
// operation for the communicator's own thread ("ds-comm") and returns a handle at once, so
// the transfer overlaps the caller's compute; a sync variant waits for its own completion,
// and therefore for every earlier async one (when none is pending it runs on the caller's
// thread, saving two thread switches). Buffers are borrowed: keep them alive, inputs unchanged and
// outputs unread until the operation completed (the handle's Wait() returned, or its destructor
// ran).
//
// Errors: a timeout, a failed peer or Abort() fails the operation and the communicator; every
// later call returns that same status (sticky, as leveldb's bg_error_), and peers blocked on
// this rank are released with an error. Bad arguments (InvalidArgument) are returned at once
// and leave the communicator usable.
//
//   std::unique_ptr<CommHandle> h = comm->AllReduceAsync({grads, n}, ReduceOp::kSum);
//   ...  // compute that does not touch grads
//   DS_RETURN_IF_ERROR(h->Wait());
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/dtype.h"

namespace ds::parallel {

enum class ReduceOp : uint8_t { kSum = 0, kMax = 1 };
const char* ReduceOpName(ReduceOp op);  // "sum", "max"

// A borrowed buffer: `count` elements of `dtype` at `data`. Inputs are only read, although
// the pointer is not const (one type for both directions).
struct BufferView {
  BufferView() = default;
  BufferView(void* data, int64_t count, DType dtype) : data(data), count(count), dtype(dtype) {}
  BufferView(float* p, int64_t n) : BufferView(p, n, DType::kF32) {}
  BufferView(const float* p, int64_t n) : BufferView(const_cast<float*>(p), n, DType::kF32) {}
  BufferView(int32_t* p, int64_t n) : BufferView(p, n, DType::kI32) {}
  BufferView(const int32_t* p, int64_t n) : BufferView(const_cast<int32_t*>(p), n, DType::kI32) {}

  int64_t bytes() const { return count * static_cast<int64_t>(DTypeSize(dtype)); }

  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
};

// The completion of one async operation.
class CommHandle {
 public:
  // Waits for the operation (its buffers may be in use until then).
  virtual ~CommHandle() = default;
  // Blocks until the operation completed; returns its status. May be called again.
  virtual Status Wait() = 0;
  // True once the operation completed (Wait() would not block).
  virtual bool Done() const = 0;
};

enum class CommOpKind : uint8_t {
  kAllReduce,
  kReduceScatter,
  kReduceScatterV,  // ReduceScatter with per-rank chunk sizes (`counts`)
  kAllGather,
  kBroadcast,
  kAllToAll,
  kSendRecv,  // Send, Recv or both
  kBarrier,
};

// One validated operation, as the base class hands it to a backend.
struct CommOp {
  CommOpKind kind = CommOpKind::kBarrier;
  uint64_t seq = 0;  // collectives: 0, 1, 2, ... per communicator (equal on all ranks)
  BufferView in;     // AllReduce/Broadcast: the buffer; others: the input; SendRecv: sent
  BufferView out;    // ReduceScatter/AllGather/AllToAll: the output; SendRecv: received
  ReduceOp reduce = ReduceOp::kSum;
  int root = -1;  // Broadcast
  int dst = -1;   // SendRecv: where `in` goes; -1 = no send
  int src = -1;   // SendRecv: where `out` comes from; -1 = no receive
  int tag = 0;    // SendRecv
  // ReduceScatterV: size() entries, the elements of chunk k (rank k's); empty otherwise.
  std::vector<int64_t> counts;
};
// "AllReduce #3 (f32 x 1000, sum)", "Send to rank 2 (tag 7, f32 x 10)",
// "ReduceScatterV #4 (f32 x 1000 in, counts 250/0/700/50, sum)".
std::string DescribeOp(const CommOp& op);

class Communicator {
 public:
  // Stops the comm thread: operations still queued complete with Cancelled; the one running
  // finishes first (bounded by the backend's timeout).
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  // Where the buffers of its operations live: false, host memory (Gloo); true, device memory
  // (NCCL: pointers on its GPU), so callers with data on the device pass it as it is.
  virtual bool device_buffers() const { return false; }
  // Device-buffer communicators: operations issued from now on start (on the device) after
  // the work queued on `native_stream` (CUDA: a cudaStream_t) so far, i.e. after an event the
  // caller places at this point of its plan. Host communicators: nothing to order (OK).
  virtual Status OrderAfterStream(void* native_stream) {
    (void)native_stream;
    return OkStatus();
  }
  // OK while healthy; afterwards the sticky error every call returns.
  Status status() const;

  // data <- op over all ranks' data, in place. Float sums may differ in the last bits between
  // backends (reduction order); all ranks get the same bits.
  Status AllReduce(BufferView data, ReduceOp op);
  // in: size()*n elements (chunk k for rank k); out: n elements <- op over all ranks' chunk
  // rank(). in and out must not overlap.
  Status ReduceScatter(BufferView in, BufferView out, ReduceOp op);
  // ReduceScatter with unequal chunks (ZeRO-2 buckets that straddle partitions): `counts` has
  // size() entries >= 0 (zeros allowed), equal on all ranks; chunk k is counts[k] elements at
  // offset counts[0] + ... + counts[k-1] of `in` (sum(counts) elements); out: counts[rank()]
  // elements <- op over all ranks' chunk rank(). in and out must not overlap.
  Status ReduceScatterV(BufferView in, BufferView out, std::vector<int64_t> counts, ReduceOp op);
  // in: n elements; out: size()*n elements, chunk k from rank k. No overlap.
  Status AllGather(BufferView in, BufferView out);
  // data on every rank <- data on `root`.
  Status Broadcast(BufferView data, int root);
  // in and out: size()*n elements; out chunk k <- rank k's in chunk rank(). No overlap.
  Status AllToAll(BufferView in, BufferView out);
  // Point to point, matched in order per (sender, receiver, tag); sizes and dtypes must
  // match. A Send completes once the receiver has the data, so two ranks that Send to each
  // other before receiving wait for each other until the timeout: use SendRecv.
  Status Send(BufferView data, int dst, int tag);
  Status Recv(BufferView data, int src, int tag);
  Status SendRecv(BufferView send, int dst, BufferView recv, int src, int tag);
  Status Barrier();

  std::unique_ptr<CommHandle> AllReduceAsync(BufferView data, ReduceOp op);
  std::unique_ptr<CommHandle> ReduceScatterAsync(BufferView in, BufferView out, ReduceOp op);
  std::unique_ptr<CommHandle> ReduceScatterVAsync(BufferView in, BufferView out,
                                                  std::vector<int64_t> counts, ReduceOp op);
  std::unique_ptr<CommHandle> AllGatherAsync(BufferView in, BufferView out);
  std::unique_ptr<CommHandle> BroadcastAsync(BufferView data, int root);
  std::unique_ptr<CommHandle> AllToAllAsync(BufferView in, BufferView out);
  std::unique_ptr<CommHandle> SendAsync(BufferView data, int dst, int tag);
  std::unique_ptr<CommHandle> RecvAsync(BufferView data, int src, int tag);
  std::unique_ptr<CommHandle> SendRecvAsync(BufferView send, int dst, BufferView recv, int src,
                                            int tag);
  std::unique_ptr<CommHandle> BarrierAsync();

  // Process group over `ranks` (ranks of this communicator, distinct; new rank = index in
  // `ranks`) named `name` (its key space and error messages: "world/dp0"). Every rank of this
  // communicator calls Split with the same arguments, in the same order relative to its other
  // Splits; members get the new communicator, non-members nullptr. Runs on the calling
  // thread (not queued) and blocks until all members arrived or the timeout. The child is
  // independent: it has its own thread and sticky error, and may outlive this communicator.
  StatusOr<std::unique_ptr<Communicator>> Split(const std::vector<int>& ranks,
                                                const std::string& name);

  // Fails the communicator with Aborted (unless it failed already) and releases the local
  // operation in flight and peers waiting on this rank. Any thread, any time before the
  // destructor starts.
  void Abort(const std::string& reason);

 protected:
  Communicator(int rank, int size, std::string name);

  // Runs one operation to completion. Called on the comm thread only, in issue order, with
  // arguments already validated. A non-OK result fails the communicator.
  virtual Status Run(const CommOp& op) = 0;
  // Creates this rank's member of the group `ranks` (this rank is in it), see Split().
  // `split_seq` counts this communicator's Split calls (0, 1, ...; equal on all ranks).
  virtual StatusOr<std::unique_ptr<Communicator>> RunSplit(const std::vector<int>& ranks,
                                                           const std::string& name,
                                                           uint64_t split_seq) = 0;
  // The member of a Split group a store-backed backend (Gloo, NCCL) connects in RunSplit:
  // named "<this name>/<name>", its size, this rank's index in `ranks`, and the store key
  // prefix every member derives alike ("<child name>#<split_seq>.<hash of ranks>", so members
  // passing different rank lists use different keys and time out instead of joining one mesh).
  struct SplitChild {
    std::string name;
    int size = 0;
    int rank = 0;
    std::string key_prefix;
  };
  SplitChild ChildOfSplit(const std::vector<int>& ranks, const std::string& name,
                          uint64_t split_seq) const;
  // Releases the operation in flight and makes peers' operations with this rank fail. Called
  // once, when the communicator fails or is aborted, from any thread.
  virtual void Poison(const Status& cause) = 0;

  // The most-derived destructor calls this first, so that Run() never sees a half-destroyed
  // backend. Idempotent.
  void StopCommThread();

 private:
  struct Pending;
  class QueuedHandle;

  std::unique_ptr<CommHandle> Enqueue(CommOp op);
  // A sync call: issues through `async` (one of the *Async calls) with issue_inline_ set, so
  // that Submit runs it on the calling thread when nothing is pending, and waits for it.
  template <class Async>
  Status Sync(Async async) {
    issue_inline_ = true;
    return async()->Wait();
  }
  // Validates, numbers and queues `op`, or runs it inline when issue_inline_ is set (a sync
  // call) and nothing is pending.
  std::unique_ptr<CommHandle> Submit(CommOp op, Status validation);
  Status Fail(const Status& status);
  void CommLoop();

  // Fixed at construction.
  const int rank_;
  const int size_;
  const std::string name_;

  // Owned by the issuing thread.
  uint64_t next_seq_ = 0;
  uint64_t next_split_seq_ = 0;
  bool issue_inline_ = false;  // set by a sync call for the Submit it makes

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;  // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
  bool busy_ = false;  // guarded by mu_; an operation is running (either thread)
  Status error_;       // guarded by mu_; the sticky error

  std::thread comm_thread_;  // runs CommLoop(); joined by StopCommThread()
};

}  // namespace ds::parallel
