// GlooCommunicator's algorithms on Gloo unbound buffers, and the conversion of Gloo's
// exceptions into Status (this file and gloo_communicator.cc are the Gloo edge).
//
// Note [Own algorithms]: Gloo 0.5.0 has gloo::allreduce/allgather/broadcast/alltoall/barrier
// but no reduce-scatter, and when one of its collectives times out the exception says only
// "Timed out waiting 2000ms for recv operation to complete": not which peer. Here every wait
// names its peer (Progress), so a dead rank is reported as "receiving from rank 3". The
// algorithms are the bandwidth-optimal ones for a ring:
//   AllReduce      ring reduce-scatter then ring all-gather, in place; 2(n-1) steps, each
//                  moving count/n elements per rank (what gloo's ring and NCCL's ring do);
//                  two ranks: one exchange of the whole buffer (AllReducePair)
//   ReduceScatter  ring, accumulating into two alternating chunk-sized scratch buffers;
//                  ReduceScatterV the same over its unequal chunks (a step moves at most the
//                  largest chunk, so n-1 steps cost (n-1) x max(counts) per rank)
//   AllGather      ring, forwarding the chunk received in the previous step
//   Broadcast      chain from the root, pipelined in 1 MiB segments
//   AllToAll       pairwise: all receives posted, then sends to rank+1, rank+2, ...
//   Barrier        dissemination, ceil(log2 n) rounds of 1-byte messages
// Up to 64 KiB the ring's 2(n-1) or n-1 hops cost more than its bandwidth saves (a hop is
// 0.1 ms on an idle host, a scheduler tick of ~4 ms on a busy one), so AllReduce,
// ReduceScatter(V), AllGather and Broadcast exchange directly with every peer in one hop
// (OneHop), reducing in rank order so that all ranks get the same bits. The choice depends
// only on sizes every rank knows (ReduceScatterV's input, not its per-rank output).
// Only unbound buffers are used, never the legacy bound ones that pin SO_SNDBUF
// (feasibility.md 1.5, trap 1).
//
// Slots: a message matches a receive by (pair, slot), first come first served. Each
// collective's slot hashes its sequence number, kind, counts (ReduceScatterV: its count list,
// not its output count, which differs by rank), dtype, reduction and root, so
// ranks that disagree about the operation never match (they time out instead of Gloo
// enforcing on a size mismatch in its device thread, which would terminate the process).
// Point-to-point slots hash the tag and the byte count for the same reason.
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>

#include "parallel/comm/gloo_communicator.h"
#include "parallel/comm/reduce.h"

namespace ds::parallel {

// What an algorithm is waiting for, for the error message.
struct GlooCommunicator::Progress {
  int peer = -1;
  const char* action = "setting up";  // "receiving from", "sending to"
};

namespace {

constexpr uint64_t kCollectiveSlot = 0x20ull << 56;  // Gloo's own collectives use 0x01..0x08
constexpr uint64_t kPointToPointSlot = 0x21ull << 56;
constexpr uint64_t kHashMask = 0x00ffffffffffff00ull;  // low byte: phase within an operation
constexpr size_t kBroadcastSegmentBytes = 1 << 20;
// Up to this size (the larger of input and output) a collective is latency-bound: OneHop.
constexpr int64_t kOneHopBytes = 64 << 10;
// Two ranks all-reduce up to this size in one exchange of the whole buffer (AllReducePair).
constexpr size_t kPairBytes = size_t{64} << 20;

uint64_t Mix(uint64_t h, uint64_t v) {  // splitmix64 over the running hash
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t CollectiveSlot(const CommOp& op) {
  uint64_t h = Mix(op.seq, static_cast<uint64_t>(op.kind));
  h = Mix(h, op.in.count);
  if (op.kind != CommOpKind::kReduceScatterV) h = Mix(h, op.out.count);
  for (int64_t c : op.counts) h = Mix(h, c);
  h = Mix(h, static_cast<uint64_t>(op.in.dtype));
  h = Mix(h, static_cast<uint64_t>(op.reduce));
  h = Mix(h, static_cast<uint64_t>(op.root + 1));
  return kCollectiveSlot | (h & kHashMask);
}

uint64_t PointToPointSlot(int tag, int64_t bytes) {
  return kPointToPointSlot | (Mix(Mix(static_cast<uint64_t>(tag), bytes), 1) & kHashMask);
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

char* Bytes(const BufferView& b) { return static_cast<char*>(b.data); }

// Chunk k of `count` elements split over n ranks: the first count % n chunks get one more.
struct Chunks {
  Chunks(int64_t count, int n, size_t elem) : base(count / n), rem(count % n), elem(elem) {}
  size_t offset(int k) const { return (k * base + std::min<int64_t>(k, rem)) * elem; }
  size_t bytes(int k) const { return (base + (k < rem ? 1 : 0)) * elem; }
  size_t max_bytes() const { return (base + (rem > 0 ? 1 : 0)) * elem; }
  const int64_t base;
  const int64_t rem;
  const size_t elem;
};

// Chunk k of a reduce-scatter's input, in bytes: equal chunks of the output's size
// (ReduceScatter) or op.counts (ReduceScatterV).
class ScatterChunks {
 public:
  ScatterChunks(const CommOp& op, int n) : offsets_(n + 1, 0) {
    const size_t elem = DTypeSize(op.in.dtype);
    const bool v = op.kind == CommOpKind::kReduceScatterV;
    for (int k = 0; k < n; ++k) {
      const size_t bytes = v ? static_cast<size_t>(op.counts[k]) * elem : op.out.bytes();
      offsets_[k + 1] = offsets_[k] + bytes;
      max_bytes_ = std::max(max_bytes_, bytes);
    }
  }
  size_t offset(int k) const { return offsets_[k]; }
  size_t bytes(int k) const { return offsets_[k + 1] - offsets_[k]; }
  size_t max_bytes() const { return max_bytes_; }
  size_t total_bytes() const { return offsets_.back(); }

 private:
  std::vector<size_t> offsets_;  // n + 1 entries
  size_t max_bytes_ = 0;
};

}  // namespace

// The transfers of one operation: one unbound buffer per send or receive (Gloo allows one
// pending operation per buffer), registered in `in_flight` so that Poison() can release
// their waits. Empty transfers are skipped (every rank computes the same sizes).
class GlooCommunicator::Transfers {
 public:
  Transfers(GlooCommunicator* comm, Progress* progress) : comm_(comm), progress_(progress) {}
  ~Transfers() {
    std::lock_guard<std::mutex> lock(comm_->in_flight_.mu);
    comm_->in_flight_.buffers.clear();
  }

  // Each returns a handle for Wait(), -1 for an empty transfer.
  int Recv(int peer, uint64_t slot, void* ptr, size_t bytes) {
    return Post(peer, slot, ptr, bytes, /*send=*/false);
  }
  int Send(int peer, uint64_t slot, const void* ptr, size_t bytes) {
    return Post(peer, slot, const_cast<void*>(ptr), bytes, /*send=*/true);
  }
  // Blocks until transfer `id` completed; throws gloo::IoException on timeout, failure or
  // Poison().
  void Wait(int id) {
    if (id < 0) return;
    Entry& e = entries_[id];
    progress_->peer = e.peer;
    progress_->action = e.send ? "sending to" : "receiving from";
    const std::chrono::milliseconds timeout = comm_->options_.timeout;
    const bool done =
        e.send ? e.buf->waitSend(nullptr, timeout) : e.buf->waitRecv(nullptr, timeout);
    if (!done) throw gloo::IoException("released by Abort() or a failure");
  }

 private:
  struct Entry {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    int peer;
    bool send;
  };

  int Post(int peer, uint64_t slot, void* ptr, size_t bytes, bool send) {
    if (bytes == 0) return -1;
    progress_->peer = peer;
    progress_->action = send ? "sending to" : "receiving from";
    Entry e{comm_->context_->createUnboundBuffer(ptr, bytes), peer, send};
    {
      std::lock_guard<std::mutex> lock(comm_->in_flight_.mu);
      if (comm_->in_flight_.poisoned) throw gloo::IoException("the communicator failed");
      comm_->in_flight_.buffers.push_back(e.buf.get());
    }
    if (send) {
      e.buf->send(peer, slot);
    } else {
      e.buf->recv(peer, slot);
    }
    entries_.push_back(std::move(e));
    return static_cast<int>(entries_.size()) - 1;
  }

  GlooCommunicator* const comm_;
  Progress* const progress_;
  std::vector<Entry> entries_;
};

Status GlooCommunicator::Run(const CommOp& op) {
  Progress progress;
  try {
    const bool small = std::max(op.in.bytes(), op.out.bytes()) <= kOneHopBytes;
    switch (op.kind) {
      case CommOpKind::kAllReduce:
      case CommOpKind::kReduceScatter:
      case CommOpKind::kReduceScatterV:  // in.bytes() >= out.bytes(), equal on all ranks
      case CommOpKind::kAllGather:
      case CommOpKind::kBroadcast:
        if (small) {
          OneHop(op, &progress);
          break;
        }
        if (op.kind == CommOpKind::kAllReduce) {
          const bool pair = size() == 2 && op.in.bytes() <= kPairBytes;
          pair ? AllReducePair(op, &progress) : AllReduceRing(op, &progress);
        }
        if (op.kind == CommOpKind::kReduceScatter || op.kind == CommOpKind::kReduceScatterV) {
          ReduceScatterRing(op, &progress);
        }
        if (op.kind == CommOpKind::kAllGather) AllGatherRing(op, &progress);
        if (op.kind == CommOpKind::kBroadcast) BroadcastChain(op, &progress);
        break;
      case CommOpKind::kAllToAll:
        AllToAllPairwise(op, &progress);
        break;
      case CommOpKind::kSendRecv:
        SendRecvPair(op, &progress);
        break;
      case CommOpKind::kBarrier:
        BarrierDissemination(op, &progress);
        break;
    }
    return OkStatus();
  } catch (const std::exception& e) {
    // Released by Abort() or a failure seen elsewhere: the sticky error says why.
    Status sticky = status();
    if (!sticky.ok()) return sticky;
    const std::string where = DescribeOp(op) + " on '" + name() + "' (rank " +
                              std::to_string(rank()) + "/" + std::to_string(size()) + "): ";
    const std::string peer = "rank " + std::to_string(progress.peer);
    const std::string what = e.what();
    if (dynamic_cast<const gloo::IoException*>(&e) == nullptr) {
      return InternalError(where + "Gloo error while " + progress.action + " " + peer + ": " +
                           what);
    }
    if (what.find("Timed out") != std::string::npos) {
      return DeadlineExceededError(
          where + "timed out after " + std::to_string(options_.timeout.count()) + " ms " +
          progress.action + " " + peer + " (it is dead, stuck, or issued a different operation)");
    }
    std::string report = progress.peer >= 0 ? PeerReport(progress.peer) : "";
    if (!report.empty()) report = "; " + peer + " reported: " + report;
    return UnavailableError(where + "connection to " + peer + " failed while " + progress.action +
                            " it: " + what + report);
  } catch (...) {
    return InternalError(DescribeOp(op) + " on '" + name() + "': unknown exception");
  }
}

char* GlooCommunicator::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void GlooCommunicator::OneHop(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const uint64_t slot = CollectiveSlot(op);
  Transfers t(this, progress);
  std::vector<int> ids;
  if (op.kind == CommOpKind::kBroadcast) {
    for (int k = 1; k < n && r == op.root; ++k) {
      ids.push_back(t.Send(Mod(r + k, n), slot, op.in.data, op.in.bytes()));
    }
    if (r != op.root) ids.push_back(t.Recv(op.root, slot, op.in.data, op.in.bytes()));
    for (int id : ids) t.Wait(id);
    return;
  }
  // Part k: what rank k contributes to this rank's result, landing at parts + k * chunk.
  // A reduce-scatter sends rank k its chunk k (chunk sizes may differ: ReduceScatterV).
  const bool gather = op.kind == CommOpKind::kAllGather;
  const bool scatter =
      op.kind == CommOpKind::kReduceScatter || op.kind == CommOpKind::kReduceScatterV;
  const size_t chunk = scatter ? op.out.bytes() : op.in.bytes();
  const ScatterChunks chunks(op, scatter ? n : 0);
  char* parts = gather ? Bytes(op.out) : Scratch(n * chunk);
  const auto sent_to = [&](int k) { return Bytes(op.in) + (scatter ? chunks.offset(k) : 0); };
  const auto sent_bytes = [&](int k) { return scatter ? chunks.bytes(k) : chunk; };
  if (chunk > 0) std::memcpy(parts + r * chunk, sent_to(r), chunk);
  for (int k = 1; k < n; ++k) {
    const int src = Mod(r - k, n);
    ids.push_back(t.Recv(src, slot, parts + src * chunk, chunk));
  }
  for (int k = 1; k < n; ++k) {
    const int dst = Mod(r + k, n);
    ids.push_back(t.Send(dst, slot, sent_to(dst), sent_bytes(dst)));
  }
  for (int id : ids) t.Wait(id);
  if (gather || chunk == 0) return;
  char* result = Bytes(op.out);  // AllReduce: op.out is op.in (in place)
  const int64_t count = chunk / DTypeSize(op.in.dtype);
  std::memcpy(result, parts, chunk);
  for (int k = 1; k < n; ++k) ReduceInto(result, parts + k * chunk, count, op.in.dtype, op.reduce);
}

// Two ranks: each sends its whole buffer and adds the other's. The ring moves the same bytes
// (two halves) in two hops, each a wake-up of both ranks' Gloo threads, which on a busy host
// costs more than the half-buffer saves (TP's activation all-reduces, ~1 MiB each); the scratch
// is the whole buffer, hence kPairBytes. Both ranks compute rank 0's value op rank 1's, so they
// hold the same bits (max of -0 and +0 too); a sum's bits are the ring's, whose chunks add the
// same two values (IEEE addition commutes).
void GlooCommunicator::AllReducePair(const CommOp& op, Progress* progress) {
  const int peer = 1 - rank();
  const uint64_t slot = CollectiveSlot(op);
  const size_t bytes = op.in.bytes();
  char* data = Bytes(op.in);
  char* other = Scratch(bytes);
  Transfers t(this, progress);
  const int rx = t.Recv(peer, slot, other, bytes);
  const int tx = t.Send(peer, slot, data, bytes);
  t.Wait(rx);
  t.Wait(tx);  // the send reads `data`: reduce into it only after
  if (rank() == 0) {
    ReduceInto(data, other, op.in.count, op.in.dtype, op.reduce);
  } else {
    ReduceInto(other, data, op.in.count, op.in.dtype, op.reduce);
    std::memcpy(data, other, bytes);
  }
}

void GlooCommunicator::AllReduceRing(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  if (n == 1) return;
  const Chunks chunks(op.in.count, n, DTypeSize(op.in.dtype));
  const int left = Mod(r - 1, n), right = Mod(r + 1, n);
  const uint64_t slot = CollectiveSlot(op);
  char* data = Bytes(op.in);
  char* tmp = Scratch(chunks.max_bytes());
  // Reduce-scatter: in step s, send the chunk reduced in step s-1 and reduce the next one;
  // rank r ends up owning chunk r.
  for (int s = 0; s < n - 1; ++s) {
    const int send_k = Mod(r - s - 1, n), recv_k = Mod(r - s - 2, n);
    Transfers t(this, progress);
    const int rx = t.Recv(left, slot, tmp, chunks.bytes(recv_k));
    const int tx = t.Send(right, slot, data + chunks.offset(send_k), chunks.bytes(send_k));
    t.Wait(rx);
    ReduceInto(data + chunks.offset(recv_k), tmp, chunks.bytes(recv_k) / chunks.elem, op.in.dtype,
               op.reduce);
    t.Wait(tx);
  }
  // All-gather: forward the chunk received in the previous step.
  for (int s = 0; s < n - 1; ++s) {
    const int send_k = Mod(r - s, n), recv_k = Mod(r - s - 1, n);
    Transfers t(this, progress);
    const int rx = t.Recv(left, slot | 1, data + chunks.offset(recv_k), chunks.bytes(recv_k));
    const int tx = t.Send(right, slot | 1, data + chunks.offset(send_k), chunks.bytes(send_k));
    t.Wait(rx);
    t.Wait(tx);
  }
}

void GlooCommunicator::ReduceScatterRing(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const ScatterChunks chunks(op, n);
  const char* in = Bytes(op.in);
  char* out = Bytes(op.out);
  // Every rank forwards partial sums, also one whose own chunk is empty: only an empty input
  // (equal on all ranks) has nothing to move.
  if (chunks.total_bytes() == 0) return;
  if (n == 1) {
    std::memcpy(out, in, chunks.bytes(0));
    return;
  }
  const int left = Mod(r - 1, n), right = Mod(r + 1, n);
  const uint64_t slot = CollectiveSlot(op);
  const size_t max_chunk = chunks.max_bytes();
  char* partial[2] = {Scratch(2 * max_chunk), Scratch(2 * max_chunk) + max_chunk};
  // Step s receives the partial sum of chunk r-s-2 over ranks r-s-2..r-1, adds this rank's
  // part and forwards it in step s+1; the last step lands in `out` (chunk r). The left
  // neighbour sends in step s the chunk this rank receives, so both sides agree on its size.
  for (int s = 0; s < n - 1; ++s) {
    const int send_k = Mod(r - s - 1, n), recv_k = Mod(r - s - 2, n);
    char* target = s == n - 2 ? out : partial[s % 2];
    const char* source = s == 0 ? in + chunks.offset(send_k) : partial[(s - 1) % 2];
    const size_t recv_bytes = chunks.bytes(recv_k);
    Transfers t(this, progress);
    const int rx = t.Recv(left, slot, target, recv_bytes);
    const int tx = t.Send(right, slot, source, chunks.bytes(send_k));
    t.Wait(rx);
    ReduceInto(target, in + chunks.offset(recv_k), recv_bytes / DTypeSize(op.in.dtype), op.in.dtype,
               op.reduce);
    t.Wait(tx);
  }
}

void GlooCommunicator::AllGatherRing(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const size_t chunk = op.in.bytes();
  char* out = Bytes(op.out);
  std::memcpy(out + r * chunk, op.in.data, chunk);
  const int left = Mod(r - 1, n), right = Mod(r + 1, n);
  const uint64_t slot = CollectiveSlot(op);
  for (int s = 0; s < n - 1; ++s) {
    const int send_k = Mod(r - s, n), recv_k = Mod(r - s - 1, n);
    Transfers t(this, progress);
    const int rx = t.Recv(left, slot, out + recv_k * chunk, chunk);
    const int tx = t.Send(right, slot, out + send_k * chunk, chunk);
    t.Wait(rx);
    t.Wait(tx);
  }
}

void GlooCommunicator::BroadcastChain(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const int pos = Mod(r - op.root, n);  // place in the chain root -> root+1 -> ...
  const int prev = Mod(r - 1, n), next = Mod(r + 1, n);
  const bool has_next = pos < n - 1;
  const uint64_t slot = CollectiveSlot(op);
  char* data = Bytes(op.in);
  const size_t bytes = op.in.bytes();
  Transfers t(this, progress);
  std::vector<int> rx, tx;
  // All receives up front, so segment i+1 arrives while segment i is forwarded.
  for (size_t off = 0; pos > 0 && off < bytes; off += kBroadcastSegmentBytes) {
    rx.push_back(t.Recv(prev, slot, data + off, std::min(kBroadcastSegmentBytes, bytes - off)));
  }
  for (size_t off = 0, i = 0; off < bytes; off += kBroadcastSegmentBytes, ++i) {
    if (pos > 0) t.Wait(rx[i]);
    if (has_next) {
      tx.push_back(t.Send(next, slot, data + off, std::min(kBroadcastSegmentBytes, bytes - off)));
    }
  }
  for (int id : tx) t.Wait(id);
}

void GlooCommunicator::AllToAllPairwise(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const size_t chunk = op.in.bytes() / n;
  const char* in = Bytes(op.in);
  char* out = Bytes(op.out);
  std::memcpy(out + r * chunk, in + r * chunk, chunk);
  const uint64_t slot = CollectiveSlot(op);
  Transfers t(this, progress);
  std::vector<int> rx, tx;
  for (int k = 1; k < n; ++k) {
    const int src = Mod(r - k, n);
    rx.push_back(t.Recv(src, slot, out + src * chunk, chunk));
  }
  for (int k = 1; k < n; ++k) {
    const int dst = Mod(r + k, n);
    tx.push_back(t.Send(dst, slot, in + dst * chunk, chunk));
  }
  for (int id : rx) t.Wait(id);
  for (int id : tx) t.Wait(id);
}

void GlooCommunicator::SendRecvPair(const CommOp& op, Progress* progress) {
  Transfers t(this, progress);
  int rx = -1, tx = -1;
  if (op.src >= 0) {
    rx = t.Recv(op.src, PointToPointSlot(op.tag, op.out.bytes()), op.out.data, op.out.bytes());
  }
  if (op.dst >= 0) {
    tx = t.Send(op.dst, PointToPointSlot(op.tag, op.in.bytes()), op.in.data, op.in.bytes());
  }
  t.Wait(rx);
  t.Wait(tx);
}

void GlooCommunicator::BarrierDissemination(const CommOp& op, Progress* progress) {
  const int n = size(), r = rank();
  const uint64_t slot = CollectiveSlot(op);
  char token = 1, sink = 0;
  uint64_t round = 0;
  for (int d = 1; d < n; d *= 2, ++round) {
    Transfers t(this, progress);
    const int rx = t.Recv(Mod(r - d, n), slot | round, &sink, 1);
    const int tx = t.Send(Mod(r + d, n), slot | round, &token, 1);
    t.Wait(rx);
    t.Wait(tx);
  }
}

}  // namespace ds::parallel
