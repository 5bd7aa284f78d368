// DeepSpeed's monitor blocks (deepspeed/monitor/config.py): tensorboard and csv_monitor are
// written by rank 0 (runtime/monitor); wandb and comet need a network service and stay off,
// with a warning.
#include "runtime/config/job_config_internal.h"

namespace ds::config::internal {
namespace {

void ParseTarget(MapReader& root, const char* key, MonitorTargetConfig* t) {
  MapReader r = root.Block(key);
  r.Get("enabled", &t->enabled);
  r.Get("output_path", &t->output_path);
  r.Get("job_name", &t->job_name);
  r.Require(!t->job_name.empty(), "job_name", "must not be empty");
  r.Finish();
}

void ParseService(MapReader& root, const char* key, const char* service) {
  MapReader r = root.Block(key);
  if (!r.present()) return;
  bool enabled = false;
  r.Get("enabled", &enabled);
  for (const char* k : {"group", "team", "project", "api_key", "workspace", "experiment_name",
                        "online", "mode", "samples_log_interval", "experiment_key"})
    r.Known(k);
  r.Finish();
  r.Warn("\"" + std::string(key) + "\"" + (enabled ? " is enabled, but it" : "") +
         " needs a network service (" + service +
         ") that jobs here do not reach; it is off. Use \"tensorboard\" or \"csv_monitor\" "
         "(written by rank 0 under output_path/job_name)");
}

}  // namespace

void ParseDeepSpeedMonitor(MapReader& root, MonitorConfig* m) {
  ParseTarget(root, "tensorboard", &m->tensorboard);
  ParseTarget(root, "csv_monitor", &m->csv_monitor);
  ParseService(root, "wandb", "Weights & Biases");
  ParseService(root, "comet", "Comet");
}

}  // namespace ds::config::internal
