// Task-level evaluation after training. When the validation data comes from
// `ds-data addition` (a task.json beside the validation file), generates answers greedily
// for every held-out problem in val_problems.txt and prints the exact-match accuracy.
// Otherwise does nothing.
#pragma once

#include <string>

#include "runtime/worker/trainer.h"

namespace ds::worker {

struct TaskResult {
  bool ran = false;
  int64_t problems = 0;
  int64_t correct = 0;
  double accuracy() const { return problems ? static_cast<double>(correct) / problems : 0; }
};

// part / whole as a percentage with one decimal, or as many more as it takes (up to six) for a
// miss not to read 100% or a hit 0%: 1946/2000 -> "97.3", 1999/2000 -> "99.95".
std::string ExactPercent(int64_t part, int64_t whole);

// Evaluates and prints "eval: addition exact match 97.3% (1946/2000) ...".
StatusOr<TaskResult> EvaluateTask(Trainer& trainer, int64_t max_problems = 0);

}  // namespace ds::worker
