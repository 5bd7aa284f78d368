// ds-worker's training loop: the steps to the end of the run with progress, metrics (monitor.csv,
// the step monitors), validation and checkpoints as the job says, the plan beacon marking what
// the rank does between steps (plan_beacon.h); and the run's closing lines.
//
//   LoopHooks hooks{[&] { return trainer->TrainStep(); }, [&](const StepMetrics& m) { ... }};
//   RunRecord run;
//   DS_RETURN_IF_ERROR(TrainLoop(trainer, hooks, &run));
//   PrintRunSummary(trainer, rank, run);
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/worker/memory_copier.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

struct LoopHooks {
  std::function<StatusOr<StepMetrics>()> step;  // one training step
  std::function<void(const StepMetrics&)>
      after_step;  // e.g. the coordinator's report; may be empty
  // fault_tolerance.in_memory_interval: every that many steps the rank's state is copied into
  // its buffer and sent while the next steps run (memory_copier.h); null: no copies.
  MemoryCopier* copier = nullptr;
};

// What the loop keeps for the run's closing lines.
struct RunRecord {
  std::vector<std::pair<double, double>> pipe_ms;  // a pipeline's (compute, step) ms per step
  // The op and instruction profiles (DS_PROFILE_OPS) as they stood after the loop's first step,
  // which touches every buffer for the first time (page faults inflate its forward ops and the
  // optimizer's first pass); PrintRunSummary prints what the later steps added.
  std::map<std::string, exec::NodeProfile> warm_ops;
  std::map<std::string, double> warm_instructions;
  int64_t warm_step = -1;  // the step they were taken after; -1: none (a run of one step)
};

Status TrainLoop(Trainer* trainer, const LoopHooks& hooks, RunRecord* run);

// A pipeline's compute against its step time and the idle fraction, past the first two steps
// (they fault their memory in).
void PrintPipelineIdle(const std::vector<std::pair<double, double>>& pipe_ms);

// The run's closing lines: the op and instruction profiles (when on; the steps after the first
// where the run had more than one), the steps and peak RSS, and with DS_MEMORY_PROFILE the model
// states' memory.
void PrintRunSummary(Trainer* trainer, int rank, const RunRecord& run);

}  // namespace ds::worker
