#include "launcher/coordinator/progress_reporter.h"

#include <utility>

#include "runtime/base/logging.h"

namespace ds::launcher {

ProgressReporter::ProgressReporter(std::unique_ptr<CoordinatorClient> client, ProgressReport first,
                                   Where where, std::chrono::milliseconds interval)
    : client_(std::move(client)),
      where_(std::move(where)),
      interval_(interval),
      latest_(std::move(first)) {
  thread_ = std::thread([this] { Loop(); });
}

ProgressReporter::~ProgressReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressReporter::Update(const ProgressReport& report, bool send_now) {
  ProgressReport r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int rank = latest_.rank, round = latest_.round;
    latest_ = report;
    latest_.rank = rank;
    latest_.round = round;
    r = latest_;
  }
  if (send_now) Send(std::move(r));
}

void ProgressReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) break;
    ProgressReport r = latest_;
    lock.unlock();
    Send(std::move(r));
    lock.lock();
  }
}

void ProgressReporter::Send(ProgressReport report) {
  if (where_) report.position = where_();
  Status s = client_->ReportProgress(report);
  std::lock_guard<std::mutex> lock(send_mu_);
  if (!s.ok() && !warned_) {
    warned_ = true;
    DS_LOG_WARN("worker", "progress report: {}", s.ToString());
  }
}

}  // namespace ds::launcher
