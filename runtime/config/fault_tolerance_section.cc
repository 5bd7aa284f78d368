// The fault_tolerance block (FaultToleranceConfig in job_config.h).
#include <cstdlib>
#include <string>

#include "runtime/config/job_config_internal.h"

namespace ds::config::internal {

void ParseFaultTolerance(MapReader& root, FaultToleranceConfig* f) {
  MapReader r = root.Block("fault_tolerance");
  // auto (the default), off / false, or a number of seconds.
  std::string text;
  if (r.IsFalse("hang_timeout")) {
    f->hang_detection = false;
  } else if (!r.IsAuto("hang_timeout") && r.Get("hang_timeout", &text)) {
    char* end = nullptr;
    const double seconds = std::strtod(text.c_str(), &end);
    const bool number = !text.empty() && end == text.c_str() + text.size();
    f->hang_detection = text != "off";
    if (number) f->hang_timeout_s = seconds;
    r.Require(text == "off" || (number && seconds > 0), "hang_timeout",
              "must be auto, off or a number of seconds > 0");
  }
  r.Get("hang_multiple", &f->hang_multiple);
  r.Require(f->hang_multiple >= 1, "hang_multiple", "must be >= 1 (the p99 step time's multiple)");
  r.Get("hang_warmup_steps", &f->hang_warmup_steps);
  r.Require(f->hang_warmup_steps >= 0, "hang_warmup_steps", "must be >= 0");
  r.Get("hang_timeout_min", &f->hang_timeout_min_s);
  r.Require(f->hang_timeout_min_s > 0, "hang_timeout_min", "must be > 0 seconds");
  r.Get("hang_timeout_max", &f->hang_timeout_max_s);
  r.Require(f->hang_timeout_max_s >= f->hang_timeout_min_s, "hang_timeout_max",
            "must be >= hang_timeout_min");
  r.Get("in_memory_interval", &f->in_memory_interval);
  r.Require(f->in_memory_interval >= 0, "in_memory_interval",
            "must be >= 0 (steps between in-memory copies; 0 = off)");
  r.Finish();
}

}  // namespace ds::config::internal
