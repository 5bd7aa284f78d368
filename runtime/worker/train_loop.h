// ds-worker's training loop: the steps to the end of the run with progress, metrics (monitor.csv,
// the step monitors), validation and checkpoints as the job says, the plan beacon marking what
// the rank does between steps (plan_beacon.h); and the run's closing lines.
//
//   LoopHooks hooks{[&] { return trainer->TrainStep(); }, [&](const StepMetrics& m) { ... }};
//   DS_RETURN_IF_ERROR(TrainLoop(trainer, hooks, &pipe_ms));
//   PrintRunSummary(trainer, rank);
#pragma once

#include <functional>
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

// A pipeline's (compute, step) ms of each step go into pipe_ms.
Status TrainLoop(Trainer* trainer, const LoopHooks& hooks,
                 std::vector<std::pair<double, double>>* pipe_ms);

// A pipeline's compute against its step time and the idle fraction, past the first two steps
// (they fault their memory in).
void PrintPipelineIdle(const std::vector<std::pair<double, double>>& pipe_ms);

// The run's closing lines: the op and instruction profiles (when on), the steps and peak RSS,
// and with DS_MEMORY_PROFILE the model states' memory.
void PrintRunSummary(Trainer* trainer, int rank);

}  // namespace ds::worker
