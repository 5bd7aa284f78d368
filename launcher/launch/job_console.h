// What ds-launch prints while it follows a job: the ranks' forwarded output as "[rank N] line",
// a progress line (step, loss, tokens/s, ETA) redrawn on a terminal, and how a job failed.
//
//   Console console(&state);
//   console.Pump(std::chrono::milliseconds(200));   // in the launcher's loop
#pragma once

#include <chrono>
#include <cstdint>

#include "launcher/coordinator/coordinator_state.h"

namespace ds::launcher {

class Console {
 public:
  explicit Console(CoordinatorState* state);
  // Prints the log lines that arrived (waiting up to `wait` for some), then the progress line.
  void Pump(std::chrono::milliseconds wait);
  void ClearLine();

 private:
  void Progress();
  CoordinatorState* state_;
  bool tty_;
  bool progress_shown_ = false;
  uint64_t cursor_ = 0;
  int eta_round_ = -1;
  int64_t eta_step_ = 0;
  std::chrono::steady_clock::time_point eta_start_;
};

// The job's end when it failed: the phase, the first failure and its rank's last lines.
void PrintFailure(const JobOutcome& out);

}  // namespace ds::launcher
