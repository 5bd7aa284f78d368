#include "launcher/coordinator/clock.h"

namespace ds::launcher {
namespace {

class RealSteadyClock : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  SteadyTime WakeTimeFor(SteadyTime t) const override { return t; }
};

}  // namespace

const Clock* SteadyClock() {
  static const RealSteadyClock* clock = new RealSteadyClock();
  return clock;
}

SteadyTime FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void FakeClock::Advance(std::chrono::milliseconds d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
}

}  // namespace ds::launcher
