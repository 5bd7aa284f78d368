// Loss scaling for fp16 training with DeepSpeed's semantics (the fp16 block):
// loss_scale 0 = dynamic, starting at 2^initial_scale_power; an overflowing step is
// skipped; after `hysteresis` overflows the scale halves (not below min_loss_scale);
// after loss_scale_window clean steps since the last overflow it doubles. A non-zero
// loss_scale is static. With bf16 or fp32 the scaler is disabled (scale 1, never skips).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::optim {

struct LossScalerOptions {
  bool enabled = false;   // fp16 only
  double loss_scale = 0;  // 0: dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Records the result of one step. Returns FailedPrecondition when an overflow happens
  // at the minimum scale (DeepSpeed ends the run there too).
  Status Update(bool overflow);

  int64_t skipped_steps() const { return skipped_; }
  // JSON state for checkpoints.
  std::string SaveState() const;
  Status LoadState(const std::string& json);

 private:
  LossScalerOptions opt_;
  bool dynamic_;
  double scale_;
  int cur_hysteresis_;
  int64_t iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int64_t skipped_ = 0;
};

}  // namespace ds::optim
