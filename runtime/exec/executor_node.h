// The executor's per-node record and alignment rule, shared by its files (executor.cc runs the
// nodes, executor_build.cc binds them, executor_layout.cc places the activations). Internal to
// runtime/exec.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/registry.h"
#include "runtime/exec/executor.h"
#include "runtime/graph/activation_grads.h"

namespace ds::exec {

struct Executor::NodeExec {
  const NodeInfo* node = nullptr;
  const kernels::OpDef* def = nullptr;
  const kernels::Kernel* kernel = nullptr;
  kernels::OpArgs args;                      // forward and backward share one argument set
  std::vector<Tensor> zero_before_backward;  // activation grads whose live range starts here
  // Mixed precision: (param slot, fp32 scratch view, fp32 grad scratch view). The scratch view
  // is undefined where the kernel reads the 16-bit parameter itself (Kernel::bf16_inputs,
  // Kernel::bf16_reads), the grad scratch where it adds into the stored bf16 gradient itself
  // (Kernel::bf16_param_grads).
  struct ParamUse {
    const zero::ParamSlot* slot;
    Tensor scratch;
    Tensor grad_scratch;
    bool fresh = false;  // the kernel overwrites grad_scratch (OpArgs::fresh_grads): no zeroing
  };

  std::vector<ParamUse> params;
  // Which of args.grad_in are parameters' gradients and which activations' (split backward).
  std::vector<int> param_grads, act_grads;
};

namespace internal {

// Every buffer the executor places starts on a 64-byte boundary (the planner counts them so).
inline size_t AlignUp(size_t n) { return static_cast<size_t>(ArenaBytes(static_cast<int64_t>(n))); }

}  // namespace internal
}  // namespace ds::exec
