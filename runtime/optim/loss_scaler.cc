#include "runtime/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ds::optim {

LossScaler::LossScaler(const LossScalerOptions& o)
    : opt_(o),
      dynamic_(o.enabled && o.loss_scale == 0),
      scale_(!o.enabled
                 ? 1.0
                 : (o.loss_scale > 0 ? o.loss_scale : std::ldexp(1.0, o.initial_scale_power))),
      cur_hysteresis_(std::max(1, o.hysteresis)) {}

// DeepSpeed's DynamicLossScaler.update_scale.
Status LossScaler::Update(bool overflow) {
  if (overflow) ++skipped_;
  if (!dynamic_) {
    ++iter_;
    return OkStatus();
  }
  const int delayed_shift = std::max(1, opt_.hysteresis);
  if (overflow) {
    if (delayed_shift == 1 || cur_hysteresis_ == 1) {
      if (scale_ <= opt_.min_loss_scale)
        return FailedPreconditionError(
            "fp16: gradient overflow with the loss scale already at its minimum (" +
            std::to_string(opt_.min_loss_scale) + ")");
      scale_ = std::max(scale_ / 2.0, opt_.min_loss_scale);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = iter_;
  } else {
    if (opt_.consecutive_hysteresis) cur_hysteresis_ = delayed_shift;
    if ((iter_ - last_overflow_iter_) % opt_.loss_scale_window == 0) {
      if (!opt_.consecutive_hysteresis) cur_hysteresis_ = delayed_shift;
      scale_ *= 2.0;
    }
  }
  ++iter_;
  return OkStatus();
}

std::string LossScaler::SaveState() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "{\"scale\": %.17g, \"cur_hysteresis\": %d, \"iter\": %lld, "
                "\"last_overflow_iter\": %lld, \"skipped\": %lld}",
                scale_, cur_hysteresis_, static_cast<long long>(iter_),
                static_cast<long long>(last_overflow_iter_), static_cast<long long>(skipped_));
  return buf;
}

Status LossScaler::LoadState(const std::string& json) {
  double scale;
  int hyst;
  long long iter, last, skipped;
  if (std::sscanf(json.c_str(),
                  "{\"scale\": %lf, \"cur_hysteresis\": %d, \"iter\": %lld, "
                  "\"last_overflow_iter\": %lld, \"skipped\": %lld}",
                  &scale, &hyst, &iter, &last, &skipped) != 5)
    return DataLossError("loss scaler state is malformed: " + json.substr(0, 80));
  scale_ = scale;
  cur_hysteresis_ = hyst;
  iter_ = iter;
  last_overflow_iter_ = last;
  skipped_ = skipped;
  return OkStatus();
}

}  // namespace ds::optim
