// MemoryCopier: a rank's in-memory copies (fault_tolerance.in_memory_interval) sent from a thread
// while the next steps compute. One copy is in flight at a time: Acquire waits for the last
// one's sends to end and hands its buffer back for the next snapshot, so a rank never runs more
// than one copy ahead of what its targets hold (the coordinator's recovery step relies on it).
// A failed send is logged and counted, never fatal: the targets then lack that step's copy and
// a restart resumes from an older one, or from the disk checkpoint.
//
//   MemoryCopier copier(rank, {{"node0", put0}, {"node1", put1}});
//   const auto t0 = std::chrono::steady_clock::now();
//   std::string* buf = copier.Acquire();             // waits for the previous copy
//   DS_RETURN_IF_ERROR(trainer->SnapshotState(buf));
//   copier.Send(trainer->step(), t0);                // returns at once
//   ...
//   std::printf("%s\n", copier.Summary().c_str());   // at the end (joins)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/status.h"

namespace ds::worker {

struct CopyTarget {
  std::string name;  // for logs: the node or address
  std::function<Status(int64_t step, const std::string& copy)> put;
};

class MemoryCopier {
 public:
  MemoryCopier(int rank, std::vector<CopyTarget> targets);
  ~MemoryCopier();  // waits for the copy in flight, then joins the thread
  MemoryCopier(const MemoryCopier&) = delete;
  MemoryCopier& operator=(const MemoryCopier&) = delete;

  // Blocks until no copy is in flight; the buffer to fill with the next copy.
  std::string* Acquire();
  // Sends the buffer Acquire returned, as the copy of `step`, to every target in order;
  // `began`: when the loop began this copy (Acquire's wait and the snapshot count from there).
  void Send(int64_t step, std::chrono::steady_clock::time_point began);
  // Blocks until no copy is in flight.
  void Drain();

  struct Stats {
    int64_t attempts = 0;      // copies the thread sent (or tried to)
    int64_t copies = 0;        // copies sent to every target
    int64_t failed_sends = 0;  // sends that failed (per target)
    int64_t bytes = 0;         // the last copy's size
    double wait_ms = 0;        // total time Acquire blocked the training loop
    double loop_ms = 0;        // total time from Acquire to Send (the wait and the snapshot)
    double send_ms = 0;        // total time the thread spent sending
  };
  Stats stats() const;
  // One line: copies, size, the loop's wait and the thread's send time per copy.
  std::string Summary() const;

 private:
  void Run();

  const int rank_;
  const std::vector<CopyTarget> targets_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string buffer_;
  int64_t pending_step_ = -1;  // >= 0: a copy waits for or is in its sends
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace ds::worker
