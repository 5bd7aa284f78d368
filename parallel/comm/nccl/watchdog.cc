#include "parallel/comm/nccl/watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ds::parallel {

CollectiveWatchdog::CollectiveWatchdog(std::string who, WatchdogOptions options,
                                       WatchdogProbe* probe, Clock clock)
    : who_(std::move(who)),
      options_(options),
      probe_(probe),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {}

CollectiveWatchdog::~CollectiveWatchdog() { Stop(); }

void CollectiveWatchdog::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ds-nccl-wd");
    Loop();
  });
}

void CollectiveWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Poll().IgnoreError();  // a failure is recorded in error_ and handled below
    lock.lock();
    if (!error_.ok()) {
      // Failed: nothing left to watch. Sleep until stopped.
      cv_.wait(lock, [&] { return stopping_; });
      break;
    }
    cv_.wait_for(lock, options_.poll_interval, [&] { return stopping_; });
  }
}

void CollectiveWatchdog::Track(uint64_t id, std::string what) {
  const auto now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  ops_[id] = Op{std::move(what), now};
}

std::string CollectiveWatchdog::FormatTimeout(std::chrono::milliseconds timeout) {
  const int64_t ms = timeout.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

Status CollectiveWatchdog::Poll() {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  std::vector<std::pair<uint64_t, Op>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    ops.assign(ops_.begin(), ops_.end());
  }
  // The probe is called without mu_, so Track/status stay responsive while it works.
  std::vector<uint64_t> finished;
  Status failure;
  const Op* oldest = nullptr;  // the oldest unfinished operation
  for (const auto& [id, op] : ops) {
    StatusOr<bool> done = probe_->Finished(id);
    if (!done.ok()) {
      failure = Status(
          done.status().code(),
          who_ + ": " + op.what + " failed: " + done.status().message() + "; communicator aborted");
      break;
    }
    if (*done) {
      finished.push_back(id);
    } else if (oldest == nullptr) {
      oldest = &op;
    }
  }
  if (failure.ok()) {
    const Status async = probe_->AsyncError();
    if (!async.ok()) {
      const std::string what = oldest != nullptr ? oldest->what + " failed" : "NCCL error";
      failure = Status(async.code(),
                       who_ + ": " + what + ": " + async.message() + "; communicator aborted");
    }
  }
  if (failure.ok() && oldest != nullptr && clock_() - oldest->start >= options_.timeout) {
    failure = DeadlineExceededError(who_ + ": " + oldest->what + " did not finish within " +
                                    FormatTimeout(options_.timeout) + "; communicator aborted");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : finished) ops_.erase(id);
  }
  cv_.notify_all();
  if (!failure.ok()) Fail(failure);
  return status();
}

void CollectiveWatchdog::Fail(const Status& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = cause.ok() ? InternalError(who_ + ": failed with an OK status") : cause;
  }
  cv_.notify_all();
  probe_->Abort(status());
}

Status CollectiveWatchdog::Wait(uint64_t id) {
  auto backoff = std::chrono::microseconds(10);
  const auto max_backoff =
      std::min<std::chrono::microseconds>(std::chrono::microseconds(1000), options_.poll_interval);
  for (;;) {
    const Status s = Poll();
    if (!s.ok()) return s;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (ops_.count(id) == 0) return OkStatus();
      // Woken early by another poller's progress or a failure.
      cv_.wait_for(lock, backoff, [&] { return ops_.count(id) == 0 || !error_.ok(); });
      if (!error_.ok()) return error_;
      if (ops_.count(id) == 0) return OkStatus();
    }
    backoff = std::min(backoff * 2, max_backoff);
  }
}

Status CollectiveWatchdog::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

size_t CollectiveWatchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_.size();
}

}  // namespace ds::parallel
