#include "runtime/worker/train_loop.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/planner/auto_command.h"
#include "runtime/worker/layout_report.h"
#include "runtime/worker/plan_beacon.h"
#include "runtime/worker/progress.h"
#include "runtime/worker/step_monitor.h"

namespace ds::worker {
namespace {

// parallel: auto: after the third step of the run (the first two warm the caches), rank 0 prints
// that step's time per instruction kind beside the cost model's (layout_report.h).
void ReportLayout(const Trainer& trainer, const StepMetrics& m, int64_t first_step,
                  std::map<std::string, double>* baseline) {
  if (!trainer.config().parallel.layout_predicted || trainer.world_rank() != 0) return;
  const int64_t n = trainer.step() - first_step;  // steps run by this loop
  if (n == 2) *baseline = trainer.InstructionProfile();
  if (n != 3) return;
  std::map<std::string, double> step = trainer.InstructionProfile();
  for (auto& [k, ms] : step) ms -= baseline->count(k) ? baseline->at(k) : 0;
  const char* spec = std::getenv("DS_LAYOUT_PREDICTION");
  std::fputs(LayoutReport(step, m.step_ms, planner::ParsePredictionSpec(spec ? spec : "")).c_str(),
             stdout);
}

}  // namespace

Status TrainLoop(Trainer* trainer, const LoopHooks& hooks, RunRecord* run) {
  const config::JobConfig& c = trainer->config();
  MetricsCsv csv;
  const bool moe = trainer->graph().config.count("num_experts") > 0;
  if (!c.monitor.csv.empty()) DS_RETURN_IF_ERROR(csv.Open(c.monitor.csv, trainer->step() > 0, moe));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<StepMonitor> step_monitor, StepMonitor::Create(c));
  Progress progress(trainer->total_steps(), c.monitor.log_interval);
  const int64_t first_step = trainer->step();
  std::map<std::string, double> layout_profile;  // ReportLayout's baseline: after 2 steps
  if (trainer->step() > 0) progress.Note("resumed from step " + std::to_string(trainer->step()));
  while (trainer->step() < trainer->total_steps()) {
    DS_ASSIGN_OR_RETURN(StepMetrics m, hooks.step());
    if (m.compute_ms > 0) run->pipe_ms.push_back({m.compute_ms, m.step_ms});
    if (trainer->step() == first_step + 1 && trainer->step() < trainer->total_steps()) {
      run->warm_ops = trainer->executor().profile();
      run->warm_instructions = trainer->InstructionProfile();
      run->warm_step = trainer->step();
    }
    progress.Report(m);
    if (hooks.after_step) hooks.after_step(m);
    double val = std::numeric_limits<double>::quiet_NaN();
    bool last = trainer->step() == trainer->total_steps();
    if (c.data.has_validation() && c.monitor.eval_interval > 0 &&
        (trainer->step() % c.monitor.eval_interval == 0 || last)) {
      trainer->beacon().Outside(trainer->step(), "validation");
      DS_ASSIGN_OR_RETURN(val, trainer->Evaluate(c.monitor.eval_iters));
      char line[128];
      std::snprintf(line, sizeof(line), "step %lld: validation loss %.4f",
                    static_cast<long long>(m.step), val);
      progress.Note(line);
    }
    csv.Write(m, val);
    DS_RETURN_IF_ERROR(step_monitor->Step(m, val, trainer->InstructionProfile(), stdout));
    ReportLayout(*trainer, m, first_step, &layout_profile);
    // After the step's row: a rank stopped once the copy is complete (a restart, a rescale)
    // resumes after this step, whose row must then be in the file already.
    if (hooks.copier && trainer->step() % c.fault_tolerance.in_memory_interval == 0) {
      trainer->beacon().Outside(trainer->step(), "memory copy");
      DS_RETURN_IF_ERROR(hooks.copier->Copy(
          trainer->step(), [&](int fd, uint32_t* crc) { return trainer->SnapshotTo(fd, crc); }));
    }
    if (!c.checkpoint.dir.empty() &&
        ((c.checkpoint.save_interval > 0 && trainer->step() % c.checkpoint.save_interval == 0) ||
         last)) {
      trainer->beacon().Outside(trainer->step(), "checkpoint");
      DS_RETURN_IF_ERROR(trainer->SaveCheckpoint());
    }
  }
  progress.Finish();
  return OkStatus();
}

void PrintPipelineIdle(const std::vector<std::pair<double, double>>& pipe_ms) {
  if (pipe_ms.size() <= 2) return;
  std::vector<double> idle;
  double compute = 0, step = 0;
  for (size_t i = 2; i < pipe_ms.size(); ++i) {
    idle.push_back(1 - pipe_ms[i].first / pipe_ms[i].second);
    compute += pipe_ms[i].first;
    step += pipe_ms[i].second;
  }
  std::sort(idle.begin(), idle.end());
  const double n = static_cast<double>(idle.size());
  std::printf(
      "pipeline: compute %.1f of %.1f ms per step (mean of steps 3-%zu), idle fraction "
      "%.4f (median)\n",
      compute / n, step / n, pipe_ms.size(), idle[idle.size() / 2]);
}

void PrintRunSummary(Trainer* trainer, int rank, const RunRecord& run) {
  const std::string steps = run.warm_step < 0 ? std::string("")
                                              : " (steps " + std::to_string(run.warm_step + 1) +
                                                    "-" + std::to_string(trainer->step()) + ")";
  if (!trainer->executor().profile().empty()) {
    std::printf("%-20s %8s %12s %12s%s\n", "op", "calls", "forward ms", "backward ms",
                steps.c_str());
    for (auto [op, p] : trainer->executor().profile()) {
      auto w = run.warm_ops.find(op);
      if (w != run.warm_ops.end()) {
        p.calls -= w->second.calls;
        p.forward_ms -= w->second.forward_ms;
        p.backward_ms -= w->second.backward_ms;
      }
      std::printf("%-20s %8lld %12.1f %12.1f\n", op.c_str(), static_cast<long long>(p.calls),
                  p.forward_ms, p.backward_ms);
    }
  }
  if (!trainer->InstructionProfile().empty()) {
    std::printf("%-36s %12s%s\n", "step plan instruction", "ms", steps.c_str());
    for (auto [kind, ms] : trainer->InstructionProfile()) {
      auto w = run.warm_instructions.find(kind);
      if (w != run.warm_instructions.end()) ms -= w->second;
      std::printf("%-36s %12.1f\n", kind.c_str(), ms);
    }
  }
  std::printf("done: %lld steps, peak RSS %.1f MiB\n", static_cast<long long>(trainer->step()),
              PeakRssBytes() / double(1 << 20));
  const char* profile = std::getenv("DS_MEMORY_PROFILE");
  if (profile && *profile && std::string(profile) != "0")
    std::printf("memory (rank %d): %s\n", rank, trainer->MemoryReport().c_str());
}

}  // namespace ds::worker
