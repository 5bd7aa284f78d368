// StepMonitor: what rank 0 reports after each step besides the progress line and monitor.csv,
// as a DeepSpeed user expects it:
//
//   - DeepSpeed's monitor events (its tensorboard / csv_monitor blocks; runtime/monitor), on
//     DeepSpeed's x-axis, samples seen: Train/Samples/train_loss at the samples before the step,
//     Train/Samples/lr (and loss_scale with fp16) after it, and ours beside them: grad_norm,
//     tokens_per_s, peak_rss_MiB, val_loss when evaluated; with wall_clock_breakdown
//     elapsed_time_ms_{forward,backward,step,communication,data};
//   - every steps_per_print steps (when given): DeepSpeed's "step=N, skipped=K, lr=[...],
//     mom=[...]" line, and with wall_clock_breakdown "time (ms) | forward: .. | backward: .. |
//     step: .. | communication: .. | data: .. | other: .." summed over those steps.
//
// The breakdown groups the step plan's instructions by kind (TimeGroup): compute forward,
// compute backward (recompute included), the optimizer step and its swaps, every collective
// and point-to-point transfer with the waits charged to it, and the data loader (each
// micro-batch's LOAD_MICROBATCH: reading, and packed documents' masks).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/monitor/monitor.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

// "forward", "backward", "step", "communication", "data" or "other" for an instruction kind.
const char* TimeGroup(const std::string& kind);

class StepMonitor {
 public:
  // `config` resolved (its batch triad); null-free: a monitor with nothing to do does nothing.
  static StatusOr<std::unique_ptr<StepMonitor>> Create(const config::JobConfig& config);
  // After step `m` (val_loss NaN: not evaluated); `profile`: cumulative ms per instruction kind
  // (Trainer::InstructionProfile); lines go to `out`.
  Status Step(const StepMetrics& m, double val_loss, const std::map<std::string, double>& profile,
              std::FILE* out);

 private:
  StepMonitor() = default;
  std::map<std::string, double> Since(const std::map<std::string, double>& profile,
                                      std::map<std::string, double>* last) const;

  std::unique_ptr<monitor::Monitor> monitor_;
  int64_t batch_ = 1, print_every_ = 0;
  bool fp16_ = false, breakdown_ = false;
  double beta1_ = 0, beta2_ = 0;
  int64_t skipped_ = 0;
  std::map<std::string, double> last_step_, last_print_;  // cumulative ms at the last step, print
};

}  // namespace ds::worker
