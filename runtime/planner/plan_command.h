// `ds-plan JOB.yaml --world N [--json] [--stage S] [--dump]`: plans one optimizer step for the job
// at world size N without starting a process, and prints per-rank memory (parameters, gradients,
// optimizer state, peak activations, peak total) and bytes communicated per step by collective
// kind, beside the ZeRO paper's arithmetic and DeepSpeed's estimator. --json prints the same as a
// PlanSummary in JSON; --dump prints the whole plan (text proto); --stage overrides
// zero_optimization.stage.
//
// RunPlanCommand is the whole command as a function, so ds-launch can run it as `ds-launch plan
// ...` (argv[0] is the command name). The binary linking it must also link the op definitions
// (//kernels/ops:op_defs); no kernels are needed.
#pragma once

#include <ostream>

namespace ds::planner {

// Returns the exit code: 0 on success, 1 when the job cannot be planned (the reason goes to `err`),
// CLI11's code for usage errors. Writes results to `out`.
int RunPlanCommand(int argc, char** argv, std::ostream& out, std::ostream& err);
// The same on stdout and stderr.
int RunPlanCommand(int argc, char** argv);

}  // namespace ds::planner
