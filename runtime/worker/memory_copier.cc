#include "runtime/worker/memory_copier.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::worker {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

MemoryCopier::MemoryCopier(int rank, CopySinks sinks)
    : rank_(rank), sinks_(std::move(sinks)), thread_([this] { Run(); }) {}

MemoryCopier::~MemoryCopier() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_step_ < 0; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status MemoryCopier::Copy(int64_t step, const CopyFill& fill) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_step_ < 0; });
  stats_.wait_ms += MsSince(t0);
  lock.unlock();
  t0 = std::chrono::steady_clock::now();
  StatusOr<std::string> path = sinks_.keep_local(step, fill);
  lock.lock();
  stats_.write_ms += MsSince(t0);
  if (!path.ok())
    return path.status().WithPrefix("the in-memory copy of step " + std::to_string(step));
  ++stats_.copies;
  struct stat st {};
  if (::stat(path->c_str(), &st) == 0) stats_.bytes = st.st_size;
  if (sinks_.remote.empty()) return OkStatus();
  pending_path_ = *std::move(path);
  pending_step_ = step;
  cv_.notify_all();
  return OkStatus();
}

void MemoryCopier::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_step_ < 0; });
}

// pending_path_ is only read here between Copy and the reset of pending_step_, while Copy
// waits before writing the next one.
void MemoryCopier::Run() {
  // The sends use what the step leaves of the CPU: the lowest priority this thread can take
  // (Linux sets nice per thread); on a GPU node the cores are mostly idle anyway.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_step_ >= 0; });
    if (stop_) return;
    const int64_t step = pending_step_;
    const std::string path = pending_path_;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    int failed = 0;
    for (const CopyTarget& t : sinks_.remote) {
      Status s = t.put(step, path);
      if (s.ok()) continue;
      ++failed;
      DS_LOG_WARN("memory", "rank {}: the in-memory copy of step {} did not reach {}: {}", rank_,
                  step, t.name, s.ToString());
    }
    const double ms = MsSince(t0);
    lock.lock();
    stats_.send_ms += ms;
    stats_.failed_sends += failed;
    if (failed == 0) ++stats_.sent;
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
  const double n = s.copies > 0 ? double(s.copies) : 1.0;
  char line[320];
  std::snprintf(line, sizeof(line),
                "in-memory copies (rank %d): %lld of %.1f MiB kept on this node, %lld sent to %zu "
                "other node(s); per copy %.1f ms in the loop (%.1f writing, %.1f waiting for the "
                "last send), %.1f ms sending (a thread); %lld failed send(s)",
                rank_, static_cast<long long>(s.copies), s.bytes / double(1 << 20),
                static_cast<long long>(s.sent), sinks_.remote.size(), (s.write_ms + s.wait_ms) / n,
                s.write_ms / n, s.wait_ms / n, s.send_ms / n,
                static_cast<long long>(s.failed_sends));
  return line;
}

}  // namespace ds::worker
