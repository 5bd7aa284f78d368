#include "zero/aio/io_engine.h"

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "zero/aio/aligned_buffer.h"

namespace ds::zero {

struct TicketState {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;                                          // pieces not completed; guarded by mu
  Status status;                                              // the first error; guarded by mu
  std::chrono::steady_clock::time_point submitted, finished;  // finished: guarded by mu
};

struct IoEngine::Piece {
  std::shared_ptr<TicketState> ticket;
  const IoFile* file = nullptr;
  bool write = false;
  char* buf = nullptr;
  int64_t offset = 0;
  int64_t len = 0;   // bytes submitted (padded under O_DIRECT)
  int64_t need = 0;  // bytes that must arrive (reads may stop at the end of the file after it)
  int64_t done = 0;
  std::chrono::steady_clock::time_point start;
};

namespace {

int64_t Nanos(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

}  // namespace

// One ring and the pieces queued for it. The loop takes pieces while fewer than queue_depth
// are in flight (with overlap_events; otherwise only once the last batch drained), submits
// them, and handles one completion at a time.
class IoEngine::Worker {
 public:
  explicit Worker(const IoOptions& o) : o_(o) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  Status Start() {
    const int r = io_uring_queue_init(static_cast<unsigned>(o_.queue_depth), &ring_, 0);
    if (r < 0) return InternalError(std::string("aio: io_uring_queue_init: ") + std::strerror(-r));
    ring_ready_ = true;
    thread_ = std::thread([this] { Loop(); });
    return OkStatus();
  }

  void Push(Piece p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(p));
    }
    cv_.notify_one();
  }

  std::vector<int64_t> TakeLatencies() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(latencies_);
  }

 private:
  // Moves queued pieces into the ring; false when stopping with nothing left.
  bool Refill() {
    std::unique_lock<std::mutex> lock(mu_);
    if (inflight_ == 0) cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_ && queue_.empty() && inflight_ == 0) return false;
    if (!o_.overlap_events && inflight_ > 0) return true;
    int prepared = 0;
    while (!queue_.empty() && inflight_ < o_.queue_depth) {
      Piece* p = new Piece(std::move(queue_.front()));
      queue_.pop_front();
      lock.unlock();
      p->start = std::chrono::steady_clock::now();
      Prepare(p);
      ++prepared;
      if (o_.single_submit) io_uring_submit(&ring_);
      lock.lock();
    }
    if (!o_.single_submit && prepared > 0) io_uring_submit(&ring_);
    return true;
  }

  void Prepare(Piece* p) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: inflight_ < queue_depth
    const int64_t at = p->offset + p->done;
    const unsigned n = static_cast<unsigned>(p->len - p->done);
    if (p->write)
      io_uring_prep_write(sqe, p->file->fd(), p->buf + p->done, n, at);
    else
      io_uring_prep_read(sqe, p->file->fd(), p->buf + p->done, n, at);
    io_uring_sqe_set_data(sqe, p);
    ++inflight_;
  }

  void Loop() {
    while (Refill()) {
      if (inflight_ == 0) continue;
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) continue;  // EINTR: wait again
      Piece* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --inflight_;
      Handle(p, res);
    }
  }

  // A completion of `res` bytes (or -errno) for piece p: resubmit, or finish it.
  void Handle(Piece* p, int res) {
    if (res == -EINTR || res == -EAGAIN) return Resubmit(p);
    Status error;
    if (res < 0) {
      error = InternalError(Where(p) + ": " + std::strerror(-res));
    } else if (res == 0 && !p->write && p->done < p->need) {
      error = DataLossError(Where(p) + ": the file ends at byte " +
                            std::to_string(p->offset + p->done));
    } else if (res == 0) {
      error = InternalError(Where(p) + ": the device took no bytes");
    } else {
      p->done += res;
      // A read is complete at its padded length, or earlier where the file ends after the
      // bytes it needs (an O_DIRECT read stops short of the padding there).
      const bool complete =
          p->done >= p->len || (!p->write && p->done >= p->need && p->done % kIoAlign != 0);
      if (!complete) return Resubmit(p);
    }
    Finish(p, error);
  }

  void Resubmit(Piece* p) {
    Prepare(p);
    io_uring_submit(&ring_);
  }

  void Finish(Piece* p, const Status& error) {
    if (o_.record_latency) {
      const int64_t ns = Nanos(std::chrono::steady_clock::now() - p->start);
      std::lock_guard<std::mutex> lock(mu_);
      latencies_.push_back(ns);
    }
    {
      std::lock_guard<std::mutex> lock(p->ticket->mu);
      if (!error.ok() && p->ticket->status.ok()) p->ticket->status = error;
      if (--p->ticket->remaining == 0) p->ticket->finished = std::chrono::steady_clock::now();
    }
    p->ticket->cv.notify_all();
    delete p;
  }

  static std::string Where(const Piece* p) {
    return std::string(p->write ? "aio write " : "aio read ") + p->file->path() + " at byte " +
           std::to_string(p->offset + p->done);
  }

  const IoOptions o_;
  io_uring ring_{};
  bool ring_ready_ = false;
  int inflight_ = 0;  // the worker thread's own (Refill reads it under mu_ only for the wait)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;         // guarded by mu_
  bool stop_ = false;               // guarded by mu_
  std::vector<int64_t> latencies_;  // guarded by mu_
  std::thread thread_;
};

Status CheckIoOptions(const IoOptions& o) {
  if (o.block_size <= 0 || o.block_size % kIoAlign != 0)
    return InvalidArgumentError("aio.block_size must be a positive multiple of 4096 bytes, got " +
                                std::to_string(o.block_size));
  if (o.queue_depth < 1 || o.queue_depth > 4096)
    return InvalidArgumentError("aio.queue_depth must be in 1..4096, got " +
                                std::to_string(o.queue_depth));
  if (o.intra_op_parallelism < 1 || o.intra_op_parallelism > 64)
    return InvalidArgumentError("aio.intra_op_parallelism must be in 1..64, got " +
                                std::to_string(o.intra_op_parallelism));
  return OkStatus();
}

IoEngine::IoEngine(const IoOptions& options) : options_(options) {}

IoEngine::~IoEngine() = default;

StatusOr<std::unique_ptr<IoEngine>> IoEngine::Create(const IoOptions& options) {
  Status valid = CheckIoOptions(options);
  if (!valid.ok()) return valid;
  std::unique_ptr<IoEngine> e(new IoEngine(options));
  for (int i = 0; i < options.intra_op_parallelism; ++i) {
    e->workers_.push_back(std::make_unique<Worker>(options));
    Status s = e->workers_.back()->Start();
    if (!s.ok()) return s;
  }
  return e;
}

StatusOr<IoTicket> IoEngine::Read(const IoFile& file, int64_t offset, void* buf, int64_t bytes) {
  return Submit(file, offset, static_cast<char*>(buf), bytes, false);
}

StatusOr<IoTicket> IoEngine::Write(const IoFile& file, int64_t offset, const void* buf,
                                   int64_t bytes) {
  return Submit(file, offset, static_cast<char*>(const_cast<void*>(buf)), bytes, true);
}

StatusOr<IoTicket> IoEngine::Submit(const IoFile& file, int64_t offset, char* buf, int64_t bytes,
                                    bool write) {
  const std::string what = std::string(write ? "aio write " : "aio read ") + file.path();
  if (bytes < 0 || offset < 0) return InvalidArgumentError(what + ": negative offset or size");
  if (file.direct() && (offset % kIoAlign != 0 || reinterpret_cast<uintptr_t>(buf) % kIoAlign))
    return InvalidArgumentError(what + ": O_DIRECT needs the offset (" + std::to_string(offset) +
                                ") and the buffer address aligned to 4096 bytes");
  IoTicket t;
  t.state_ = std::make_shared<TicketState>();
  const int64_t block = options_.block_size;
  const int64_t pieces = (bytes + block - 1) / block;
  t.state_->remaining = static_cast<int>(pieces);
  t.state_->submitted = t.state_->finished = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < pieces; ++i) {
    Piece p;
    p.ticket = t.state_;
    p.file = &file;
    p.write = write;
    p.buf = buf + i * block;
    p.offset = offset + i * block;
    p.need = std::min(block, bytes - i * block);
    p.len = file.direct() ? AlignUpIo(p.need) : p.need;
    workers_[next_worker_++ % workers_.size()]->Push(std::move(p));
  }
  return t;
}

Status IoEngine::Wait(IoTicket& ticket, Times* times) {
  if (!ticket.valid()) return InvalidArgumentError("aio: wait on an empty ticket");
  TicketState& s = *ticket.state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.remaining == 0; });
  Status status = s.status;
  if (times) *times = {s.submitted, s.finished};
  lock.unlock();
  ticket.state_.reset();
  return status;
}

std::vector<int64_t> IoEngine::TakeLatencies() {
  std::vector<int64_t> all;
  for (auto& w : workers_) {
    std::vector<int64_t> v = w->TakeLatencies();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace ds::zero
