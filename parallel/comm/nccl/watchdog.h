// CollectiveWatchdog: notices a collective that never finishes, or an asynchronous NCCL
// error, and turns it into an error instead of a hang.
//
// The communicator Tracks every operation it enqueues (an id and a description such as
// "AllReduce #12 (bf16 x 4194304, sum)"). Poll() asks the probe whether tracked operations
// finished (NcclCommunicator: cudaEventQuery on the completion event) and whether the
// communicator reported an asynchronous error (ncclCommGetAsyncError). When an operation has
// been in flight longer than the timeout, or an error appears, the watchdog fails: it
// records a sticky status such as
//
//   rank 3 of world: AllReduce #12 (bf16 x 4194304, sum) did not finish within 30 s;
//   communicator aborted
//
// and calls probe->Abort() once (ncclCommAbort). From then on every Poll, Wait and status()
// returns that status.
//
// The timing logic is here, separate from CUDA and NCCL: the clock and the probe are
// injected, so tests drive it with a fake clock and fake operations. Start() adds a thread
// ("ds-nccl-wd") that polls every poll_interval, so a hang is detected even when nobody
// waits; Wait() also polls, with a short backoff, for low completion latency.
//
// Thread-safe. The probe is borrowed and must outlive the watchdog; its methods are never
// called concurrently (one poll at a time), but they are called from the polling thread
// and from waiting threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/base/status.h"

namespace ds::parallel {

class WatchdogProbe {
 public:
  virtual ~WatchdogProbe() = default;
  // True once operation `id` finished on the device; an error if asking failed (that error
  // fails the watchdog, naming the operation).
  virtual StatusOr<bool> Finished(uint64_t id) = 0;
  // OK while the communicator is healthy; its asynchronous error otherwise.
  virtual Status AsyncError() = 0;
  // Called once, when the watchdog fails (by timeout, error or Fail()).
  virtual void Abort(const Status& cause) = 0;
};

struct WatchdogOptions {
  std::chrono::milliseconds timeout{300000};     // per operation, from Track to finished
  std::chrono::milliseconds poll_interval{100};  // background thread period
};

class CollectiveWatchdog {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `who` opens every message ("rank 3 of world"). `clock` defaults to steady_clock::now.
  CollectiveWatchdog(std::string who, WatchdogOptions options, WatchdogProbe* probe,
                     Clock clock = nullptr);
  // Stops the thread.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Starts the background polling thread (once).
  void Start();
  void Stop();

  // Starts the clock of operation `id` (unique while in flight).
  void Track(uint64_t id, std::string what);
  // One round: forgets finished operations, then fails on a probe error, an async error or
  // an operation past the timeout (the oldest one is named). Returns status().
  Status Poll();
  // Blocks until `id` finished (OK; also when it was never tracked) or the watchdog failed
  // (its status). Polls meanwhile.
  Status Wait(uint64_t id);
  // Fails with `cause` unless already failed (then the first failure stays); aborts.
  void Fail(const Status& cause);

  Status status() const;
  size_t in_flight() const;

  // "30 s", "1500 ms".
  static std::string FormatTimeout(std::chrono::milliseconds timeout);

 private:
  struct Op {
    std::string what;
    std::chrono::steady_clock::time_point start;
  };
  void Loop();

  // Fixed at construction.
  const std::string who_;
  const WatchdogOptions options_;
  WatchdogProbe* const probe_;
  const Clock clock_;

  std::mutex poll_mu_;  // one Poll at a time (the probe is not reentrant)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Op> ops_;  // guarded by mu_; in flight, by id (= issue order)
  Status error_;                // guarded by mu_; sticky
  bool stopping_ = false;       // guarded by mu_

  std::thread thread_;  // runs Loop() after Start()
};

}  // namespace ds::parallel
