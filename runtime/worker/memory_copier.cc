#include "runtime/worker/memory_copier.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "runtime/base/logging.h"

namespace ds::worker {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

MemoryCopier::MemoryCopier(int rank, std::vector<CopyTarget> targets)
    : rank_(rank), targets_(std::move(targets)), thread_([this] { Run(); }) {}

MemoryCopier::~MemoryCopier() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_step_ < 0; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string* MemoryCopier::Acquire() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_step_ < 0; });
  stats_.wait_ms += MsSince(t0);
  return &buffer_;
}

void MemoryCopier::Send(int64_t step, std::chrono::steady_clock::time_point began) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.loop_ms += MsSince(began);
    pending_step_ = step;
    stats_.bytes = static_cast<int64_t>(buffer_.size());
  }
  cv_.notify_all();
}

void MemoryCopier::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_step_ < 0; });
}

// The buffer is only read here between Send and the reset of pending_step_, while Acquire
// keeps the loop from writing it.
void MemoryCopier::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_step_ >= 0; });
    if (stop_) return;
    const int64_t step = pending_step_;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    int failed = 0;
    for (const CopyTarget& t : targets_) {
      Status s = t.put(step, buffer_);
      if (s.ok()) continue;
      ++failed;
      DS_LOG_WARN("memory", "rank {}: the in-memory copy of step {} did not reach {}: {}", rank_,
                  step, t.name, s.ToString());
    }
    const double ms = MsSince(t0);
    lock.lock();
    stats_.send_ms += ms;
    stats_.failed_sends += failed;
    ++stats_.attempts;
    if (failed == 0) ++stats_.copies;
    pending_step_ = -1;
    cv_.notify_all();
  }
}

MemoryCopier::Stats MemoryCopier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string MemoryCopier::Summary() const {
  const Stats s = stats();
  const double n = s.attempts > 0 ? double(s.attempts) : 1.0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "in-memory copies (rank %d): %lld sent to %zu target(s), %.1f MiB each; per "
                "copy %.1f ms in the loop (%.1f ms of it waiting for the last send), %.1f ms "
                "sending (a thread); %lld failed send(s)",
                rank_, static_cast<long long>(s.copies), targets_.size(), s.bytes / double(1 << 20),
                s.loop_ms / n, s.wait_ms / n, s.send_ms / n,
                static_cast<long long>(s.failed_sends));
  return line;
}

}  // namespace ds::worker
