#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ds::optim {

StatusOr<LrSchedule> LrSchedule::Create(const LrScheduleOptions& o) {
  const std::string& t = o.type;
  if (!t.empty() && t != "WarmupLR" && t != "WarmupDecayLR" && t != "WarmupCosineLR")
    return InvalidArgumentError("scheduler: unsupported type \"" + t +
                                "\" (WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  if (o.warmup_type != "log" && o.warmup_type != "linear")
    return InvalidArgumentError("scheduler: warmup_type must be \"log\" or \"linear\", got \"" +
                                o.warmup_type + "\"");
  if ((t == "WarmupDecayLR" || t == "WarmupCosineLR") && o.total_num_steps <= 0)
    return InvalidArgumentError("scheduler: " + t + " needs total_num_steps > 0");
  LrScheduleOptions fixed = o;
  fixed.warmup_num_steps = std::max<int64_t>(2, o.warmup_num_steps);  // as DeepSpeed
  return LrSchedule(fixed);
}

// Fraction of the warmup done at `step`: log(step+1)/log(W) or step/W.
double LrSchedule::WarmupGamma(int64_t step) const {
  const double w = static_cast<double>(opt_.warmup_num_steps);
  if (opt_.warmup_type == "log") return std::log(static_cast<double>(step) + 1.0) / std::log(w);
  return static_cast<double>(step) / w;
}

double LrSchedule::LrAt(int64_t step) const {
  const std::string& t = opt_.type;
  const int64_t w = opt_.warmup_num_steps;
  if (t.empty()) return opt_.base_lr;
  if (t == "WarmupCosineLR") {
    double ratio;
    if (step < w) {
      ratio = opt_.warmup_min_ratio + WarmupGamma(step) * (1.0 - opt_.warmup_min_ratio);
    } else {
      double done = static_cast<double>(step - w + 1);
      double total = static_cast<double>(std::max<int64_t>(1, opt_.total_num_steps - w));
      double c = (1.0 + std::cos(M_PI * std::min(1.0, done / total))) / 2.0;
      ratio = std::max(0.0, opt_.cos_min_ratio + (1.0 - opt_.cos_min_ratio) * c);
    }
    return opt_.base_lr * ratio;
  }
  const double delta = opt_.warmup_max_lr - opt_.warmup_min_lr;
  double gamma;
  if (step < w) {
    gamma = WarmupGamma(step);
  } else if (t == "WarmupDecayLR") {
    gamma = std::max(0.0, static_cast<double>(opt_.total_num_steps - step) /
                              static_cast<double>(std::max<int64_t>(1, opt_.total_num_steps - w)));
  } else {
    gamma = 1.0;
  }
  return opt_.warmup_min_lr + delta * gamma;
}

}  // namespace ds::optim
