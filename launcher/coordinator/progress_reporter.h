// A rank's reports to its job's coordinator, sent from a thread: the latest progress (Update)
// with where the rank is in its plan (the `where` callback, sampled at each send), every
// `interval`, and at once when the caller asks (the last step, before the rank exits). The
// coordinator shows them in `ds-launch status` and names a rank that hangs by its position
// (hang.h). A failing report is logged once and never stops the caller.
//
//   ProgressReporter reporter(std::move(client), {rank, round}, [&] { return Where(); });
//   reporter.Update(report, /*send_now=*/step == total);
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/coordinator_types.h"

namespace ds::launcher {

class ProgressReporter {
 public:
  using Where = std::function<std::optional<PlanPosition>()>;
  // `first`: the rank and round every report carries, and progress before the first Update.
  ProgressReporter(std::unique_ptr<CoordinatorClient> client, ProgressReport first, Where where,
                   std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  ~ProgressReporter();  // stops the thread
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // The latest progress (rank and round are kept from `first`); sent before this returns when
  // `send_now`, else by the thread.
  void Update(const ProgressReport& report, bool send_now);

 private:
  void Loop();
  void Send(ProgressReport report);

  const std::unique_ptr<CoordinatorClient> client_;
  const Where where_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  ProgressReport latest_;  // guarded by mu_
  bool stop_ = false;      // guarded by mu_
  std::mutex send_mu_;     // Send runs on the thread and, when asked, in Update
  bool warned_ = false;    // guarded by send_mu_
  std::thread thread_;
};

}  // namespace ds::launcher
