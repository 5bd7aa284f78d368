// Task-level evaluation after training. When the validation data comes from
// `ds-data addition` (a task.json beside the validation file), generates answers greedily
// for every held-out problem in val_problems.txt and prints the exact-match accuracy.
// Otherwise does nothing.
#pragma once

#include "runtime/worker/trainer.h"

namespace ds::worker {

struct TaskResult {
  bool ran = false;
  int64_t problems = 0;
  int64_t correct = 0;
  double accuracy() const { return problems ? static_cast<double>(correct) / problems : 0; }
};

// Evaluates and prints "eval: addition exact match 97.3% (1946/2000) ...".
StatusOr<TaskResult> EvaluateTask(Trainer& trainer, int64_t max_problems = 0);

}  // namespace ds::worker
