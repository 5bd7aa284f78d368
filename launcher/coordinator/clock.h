// Time source of the coordinator's protocol timers (join deadline, last call, node
// timeout, success wait, KV waits). Production uses SteadyClock(); the pure state tests
// inject a FakeClock, advance it by hand and then call CoordinatorState::Tick().
// Both implementations are thread-safe.
//
//   FakeClock clock;
//   auto state = CoordinatorState::Create(config, &clock);
//   clock.Advance(std::chrono::seconds(11)); (*state)->Tick();  // join deadline passes
#pragma once

#include <chrono>
#include <mutex>

namespace ds::launcher {

using SteadyTime = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime Now() const = 0;
  // The steady-clock time at which Now() will read `t`, for bounding a condition-variable
  // wait: `t` itself for the real clock, SteadyTime::max() for a fake clock (its time
  // moves only when a test advances it, and the test then calls Tick(), which wakes all).
  virtual SteadyTime WakeTimeFor(SteadyTime t) const = 0;
};

// The process-wide steady clock; never null, never destroyed.
const Clock* SteadyClock();

class FakeClock : public Clock {
 public:
  FakeClock() : now_(std::chrono::steady_clock::now()) {}
  SteadyTime Now() const override;
  SteadyTime WakeTimeFor(SteadyTime) const override { return SteadyTime::max(); }
  void Advance(std::chrono::milliseconds d);

 private:
  mutable std::mutex mu_;
  SteadyTime now_;  // guarded by mu_
};

}  // namespace ds::launcher
