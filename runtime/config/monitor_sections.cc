// DeepSpeed's monitor blocks (deepspeed/monitor/config.py): tensorboard and csv_monitor are
// written by rank 0 (runtime/monitor); wandb and comet need a network service and stay off,
// with a warning. And its flops_profiler block (rank 0's report at profile_step).
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

void ParseFlopsProfiler(MapReader& root, FlopsProfilerConfig* f) {
  MapReader r = root.Block("flops_profiler");
  r.Get("enabled", &f->enabled);
  r.Get("profile_step", &f->profile_step);
  r.Require(f->profile_step >= 1, "profile_step", "must be >= 1");
  r.Get("module_depth", &f->module_depth);
  r.Require(f->module_depth >= -1, "module_depth", "must be >= -1 (-1: every depth)");
  r.Get("top_modules", &f->top_modules);
  r.Require(f->top_modules >= 1, "top_modules", "must be >= 1");
  r.Get("detailed", &f->detailed);
  r.Get("output_file", &f->output_file);
  r.Get("recompute_fwd_factor", &f->recompute_fwd_factor);
  r.Require(f->recompute_fwd_factor >= 0 && f->recompute_fwd_factor <= 1, "recompute_fwd_factor",
            "must be in [0, 1]");
  r.Finish();
}

// DeepSpeed enables logging whenever the block is present, whatever `enabled` says (its
// CommsLogger.configure copies the block's presence into enabled); here `enabled` decides.
void ParseCommsLogger(MapReader& root, CommsLoggerConfig* c) {
  MapReader r = root.Block("comms_logger");
  r.Get("enabled", &c->enabled);
  r.Get("verbose", &c->verbose);
  r.Get("prof_all", &c->prof_all);
  r.Get("debug", &c->debug);
  r.Get("prof_ops", &c->prof_ops);
  r.Finish();
}

}  // namespace

void ParseDeepSpeedMonitor(MapReader& root, MonitorConfig* m) {
  ParseCommsLogger(root, &m->comms_logger);
  ParseTarget(root, "tensorboard", &m->tensorboard);
  ParseTarget(root, "csv_monitor", &m->csv_monitor);
  ParseFlopsProfiler(root, &m->flops_profiler);
  ParseService(root, "wandb", "Weights & Biases");
  ParseService(root, "comet", "Comet");
}

}  // namespace ds::config::internal
