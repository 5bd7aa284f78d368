// Which activations and activation gradients a bf16 host step stores in bf16 (Note [bf16
// activations]), apart from where they are placed (executor_layout.cc, executor_build.cc).
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/executor_node.h"
#include "runtime/graph/host_bf16.h"

namespace ds::exec {

// Note [bf16 activations] (runtime/graph/host_bf16.h, which the planner counts them by too).
bool Executor::Bf16Step() const {
  return !device_ && opt_.training && opt_.matmul == DType::kBF16 &&
         params_->model_dtype() == DType::kBF16;
}

std::vector<kernels::HostBf16> Executor::NodeHostBf16() const {
  std::vector<kernels::HostBf16> flags;
  for (const std::unique_ptr<NodeExec>& ne : nodes_) {
    const kernels::Kernel& k = *ne->kernel;
    flags.push_back({k.bf16_act_inputs, k.bf16_act_outputs, k.bf16_grad_inputs, k.bf16_grad_outputs,
                     k.overwrites_fresh_grads});
  }
  return flags;
}

void Executor::ChooseBf16Activations() {
  if (!Bf16Step()) return;
  std::vector<bool> fp32(specs_.size());
  for (size_t t = 0; t < specs_.size(); ++t) fp32[t] = specs_[t].dtype == DType::kF32;
  const std::vector<bool> bf16 = Bf16Activations(*graph_, NodeHostBf16(), fp32);
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (!bf16[t]) continue;
    specs_[t].dtype = DType::kBF16;
    ++bf16_acts_;
    bf16_act_bytes_ += specs_[t].nbytes();
  }
}

void Executor::ChooseBf16Grads() {
  if (!Bf16Step() || opt_.split_backward) return;
  std::vector<bool> fp32(grad_specs_.size());
  for (size_t t = 0; t < grad_specs_.size(); ++t) fp32[t] = grad_specs_[t].dtype == DType::kF32;
  const std::vector<bool> bf16 = Bf16Gradients(*graph_, NodeHostBf16(), fp32);
  for (size_t t = 0; t < grad_specs_.size(); ++t)
    if (bf16[t]) grad_specs_[t].dtype = DType::kBF16;
}

// After MarkFreshGrads: a bf16 gradient the executor would zero and its kernel add into means
// the rule above and the fresh marking disagree.
Status Executor::CheckBf16GradsFresh() const {
  if (!Bf16Step()) return OkStatus();  // a 16-bit device path zeroes its 16-bit gradients
  for (const std::unique_ptr<NodeExec>& ne : nodes_)
    for (const Tensor& z : ne->zero_before_backward)
      if (z.dtype() == DType::kBF16)
        return InternalError("executor: node " + ne->node->name +
                             " would zero a bf16 gradient and add into it");
  return OkStatus();
}

}  // namespace ds::exec
