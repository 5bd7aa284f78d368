// The asynchronous I/O engine of ZeRO-Infinity's swapper, on io_uring (liburing).
//
// A request (read or write `bytes` at `offset` of a file, into or from one aligned buffer) is
// cut into `block_size` pieces spread round-robin over `intra_op_parallelism` workers; each
// worker owns one ring and keeps up to `queue_depth` pieces in flight. Submit returns at once
// with an IoTicket; Wait blocks until every piece completed, so compute overlaps the I/O.
// DeepSpeed's `aio` keys mean the same here: single_submit (one io_uring_submit per piece
// instead of one per batch), overlap_events (refill the ring as completions arrive instead of
// submitting a batch and draining it).
//
// Exact for any size: under O_DIRECT a piece is padded to whole kIoAlign units inside the
// buffer (whose capacity must allow it) and a read may end early at the end of the file; short
// transfers are resubmitted for their remainder, EINTR / EAGAIN completions resubmitted as
// they were. Buffered files (no O_DIRECT) move exactly `bytes`.
//
//   DS_ASSIGN_OR_RETURN(auto engine, IoEngine::Create(options));
//   DS_ASSIGN_OR_RETURN(IoTicket t, engine->Write(file, 0, buf.data(), n));
//   ... compute ...
//   DS_RETURN_IF_ERROR(engine->Wait(t));
//
// Thread-safe: any thread may submit and wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "zero/aio/io_file.h"

namespace ds::zero {

struct IoOptions {
  int64_t block_size = 1 << 20;  // bytes per piece; a multiple of kIoAlign
  int queue_depth = 8;           // pieces in flight per worker
  int intra_op_parallelism = 1;  // workers (rings)
  bool single_submit = false;
  bool overlap_events = true;
  bool record_latency = false;  // keep each piece's submit-to-completion time (benchmarks)
};

// InvalidArgument naming the aio key: block_size not a positive multiple of 4096,
// queue_depth or intra_op_parallelism < 1.
Status CheckIoOptions(const IoOptions& options);

struct TicketState;
class IoTicket {
 public:
  IoTicket() = default;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class IoEngine;
  std::shared_ptr<TicketState> state_;
};

class IoEngine {
 public:
  static StatusOr<std::unique_ptr<IoEngine>> Create(const IoOptions& options);
  ~IoEngine();  // finishes what is in flight

  // `buf` kIoAlign-aligned with room for AlignUpIo(bytes) bytes; `offset` a multiple of
  // kIoAlign for O_DIRECT files. InvalidArgument otherwise, before anything is queued.
  StatusOr<IoTicket> Read(const IoFile& file, int64_t offset, void* buf, int64_t bytes);
  StatusOr<IoTicket> Write(const IoFile& file, int64_t offset, const void* buf, int64_t bytes);
  // The first error of the request's pieces (naming the file, offset and errno), else OK.
  // DataLoss for a read past the end of the file. A ticket is waited for once. `times`, when
  // given, gets when the request was submitted and when its last piece completed.
  struct Times {
    std::chrono::steady_clock::time_point submitted, finished;
  };
  Status Wait(IoTicket& ticket, Times* times = nullptr);

  const IoOptions& options() const { return options_; }
  // Submit-to-completion nanoseconds of every piece since the last call (record_latency).
  std::vector<int64_t> TakeLatencies();

 private:
  struct Piece;
  class Worker;
  explicit IoEngine(const IoOptions& options);
  StatusOr<IoTicket> Submit(const IoFile& file, int64_t offset, char* buf, int64_t bytes,
                            bool write);

  IoOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_worker_{0};  // round-robin over workers_, from any thread
};

}  // namespace ds::zero
