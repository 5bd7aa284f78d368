// MemoryCopier: a rank's in-memory copies (fault_tolerance.in_memory_interval). Between two steps
// the rank's state is written once, straight from its buffers, into its node's copy directory
// (RAM, kept by the agent: it outlives the worker); a thread then sends that file to the other
// nodes' agents (its buddy) while the next steps compute. One copy is in flight at a time: the
// next Copy waits for the last one's sends, so a rank never runs more than one copy ahead of what
// its buddy holds (the coordinator's recovery step relies on it). A failed send is logged and
// counted, never fatal: the buddy then lacks that step's copy, and a restart that needs it
// resumes from an older one or from the disk checkpoint.
//
//   MemoryCopier copier(rank, {keep_local, {{"10.0.0.2:7000", put}}});
//   DS_RETURN_IF_ERROR(copier.Copy(step, [&](int fd, uint32_t* crc) {
//     return trainer->SnapshotTo(fd, crc);
//   }));
//   copier.Drain();
//   std::printf("%s\n", copier.Summary().c_str());
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

// Writes the copy's bytes to a file descriptor and returns their CRC-32C.
using CopyFill = std::function<Status(int fd, uint32_t* crc)>;

struct CopyTarget {
  std::string name;  // for logs: the agent's address
  std::function<Status(int64_t step, const std::string& path)> put;  // sends the copy file
};

struct CopySinks {
  // Writes step's copy with `fill` where this node's agent keeps it; returns the file's path.
  std::function<StatusOr<std::string>(int64_t step, const CopyFill& fill)> keep_local;
  std::vector<CopyTarget> remote;  // the other nodes' agents (empty on one node)
};

class MemoryCopier {
 public:
  MemoryCopier(int rank, CopySinks sinks);
  ~MemoryCopier();  // waits for the copy in flight, then joins the thread
  MemoryCopier(const MemoryCopier&) = delete;
  MemoryCopier& operator=(const MemoryCopier&) = delete;

  // Waits for the last copy's sends, writes `step`'s copy locally (the rank's state must not
  // change meanwhile: call it between steps), then returns while the thread sends it.
  Status Copy(int64_t step, const CopyFill& fill);
  // Blocks until no copy is in flight.
  void Drain();

  struct Stats {
    int64_t copies = 0;        // copies written locally
    int64_t sent = 0;          // copies every remote target took
    int64_t failed_sends = 0;  // sends that failed (per target)
    int64_t bytes = 0;         // the last copy's size
    double wait_ms = 0;        // total time Copy waited for the last sends
    double write_ms = 0;       // total time Copy spent writing the local copy
    double send_ms = 0;        // total time the thread spent sending
  };
  Stats stats() const;
  // One line: copies, size, the loop's time per copy (waiting, writing), the thread's sends.
  std::string Summary() const;

 private:
  void Run();

  const int rank_;
  const CopySinks sinks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_path_;   // the copy file the thread sends
  int64_t pending_step_ = -1;  // >= 0: a copy waits for or is in its sends
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace ds::worker
