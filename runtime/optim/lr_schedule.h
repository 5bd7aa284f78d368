// Learning-rate schedules with DeepSpeed's names, parameters and formulas
// (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR, WarmupCosineLR, or a
// constant. Optimizer step k (0-based) uses LrAt(k); stateless, so a resume only needs k.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::optim {

struct LrScheduleOptions {
  std::string type;       // "" (constant), "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"
  double base_lr = 1e-3;  // the optimizer's lr (WarmupCosineLR scales it)
  double warmup_min_lr = 0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // or "linear"
  int64_t total_num_steps = 0;      // required by the decaying schedules
  double warmup_min_ratio = 0;      // WarmupCosineLR
  double cos_min_ratio = 1e-4;      // WarmupCosineLR
};

class LrSchedule {
 public:
  static StatusOr<LrSchedule> Create(const LrScheduleOptions& options);
  double LrAt(int64_t step) const;
  const LrScheduleOptions& options() const { return opt_; }

 private:
  explicit LrSchedule(const LrScheduleOptions& o) : opt_(o) {}
  double WarmupGamma(int64_t step) const;
  LrScheduleOptions opt_;
};

}  // namespace ds::optim
