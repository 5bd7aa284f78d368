// The fault_tolerance block (FaultToleranceConfig in job_config.h) and DeepSpeed's elasticity
// block (ElasticityConfig, elasticity.h).
#include <cstdlib>
#include <string>
#include <vector>

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

void ParseElasticity(MapReader& root, ElasticityConfig* e) {
  MapReader r = root.Block("elasticity");
  r.Get("enabled", &e->enabled);
  r.Get("max_train_batch_size", &e->max_train_batch_size);
  r.Require(e->max_train_batch_size >= 1, "max_train_batch_size", "must be >= 1");
  std::vector<std::string> micros;
  if (r.GetList("micro_batch_sizes", &micros)) {
    e->micro_batch_sizes.clear();
    for (const std::string& m : micros) {
      char* end = nullptr;
      const long long v = std::strtoll(m.c_str(), &end, 10);
      r.Require(!m.empty() && *end == '\0' && v >= 1, "micro_batch_sizes",
                "must be a list of integers >= 1");
      e->micro_batch_sizes.push_back(v);
    }
    r.Require(!e->micro_batch_sizes.empty(), "micro_batch_sizes", "must not be empty");
  }
  r.Get("min_gpus", &e->min_gpus);
  r.Require(e->min_gpus >= 1, "min_gpus", "must be >= 1");
  r.Get("max_gpus", &e->max_gpus);
  r.Require(e->max_gpus >= e->min_gpus, "max_gpus", "must be >= min_gpus");
  r.Get("prefer_larger_batch", &e->prefer_larger_batch);
  r.Get("ignore_non_elastic_batch_info", &e->ignore_non_elastic_batch_info);
  r.Inert("version", 0.1,
          "the v0.1 rule runs over the data-parallel sizes (v0.2's per-node form counts the same "
          "sizes with num_gpus_per_node 1)");
  r.Inert("num_gpus_per_node", 1.0, "the valid sizes are data-parallel sizes, counted directly");
  r.Inert("min_time", 0.0, "nothing here asks a scheduler to wait before rescaling");
  int64_t mp = 1;
  r.Get("model_parallel_size", &mp);
  r.Require(mp == 1, "model_parallel_size",
            "must be 1: the rule runs over the data-parallel size (tensor and pipeline sizes stay "
            "as parallel says)");
  r.Finish();
}

}  // namespace ds::config::internal
