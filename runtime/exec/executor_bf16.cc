// Which activations and activation gradients a bf16 host step stores in bf16 (Note [bf16
// activations]), apart from where they are placed (executor_layout.cc, executor_build.cc).
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/executor_node.h"

namespace ds::exec {
namespace {

bool Bit(uint32_t mask, size_t k) { return k < 32 && (mask >> k & 1u); }

}  // namespace

// Note [bf16 activations]
// A bf16 training step on the host (a bf16 model whose products take bf16 inputs, OpArgs::matmul
// kBF16) stores an activation in bf16 where the kernel that writes it declares that output
// (Kernel::bf16_act_outputs) and every kernel that reads it declares that input
// (Kernel::bf16_act_inputs): a linear layer's output into a GeLU, the GeLU's into the next
// linear, a norm's output into a linear, the logits into cross-entropy. It is what autocast
// keeps: the products' outputs rounded once to bf16; the residual stream, which the norms read,
// stays fp32, and so does every tensor an op without bf16 reads touches (the plan's collectives
// work on those: tensor-parallel all-reduces, pipeline sends).
// A gradient is stored in bf16 where it is written once, whole: the activation has one reader,
// which reads it once and writes its gradient fresh in bf16 (Kernel::bf16_grad_inputs with
// overwrites_fresh_grads), and the kernel that wrote the activation reads that gradient in bf16
// (Kernel::bf16_grad_outputs): the logits' gradient into the last linear layer's backward, a
// linear layer's input gradient into a norm's or a GeLU's. Gradients that sum over several
// readers (the residual stream's) stay fp32. Whole backwards only (not split, zb-h1).
bool Executor::Bf16Step() const {
  return !device_ && opt_.training && opt_.matmul == DType::kBF16 &&
         params_->model_dtype() == DType::kBF16;
}

void Executor::ChooseBf16Activations() {
  const Graph& g = *graph_;
  if (!Bf16Step()) return;
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> verdict(nt, -1);  // -1 no writer seen; 0 fp32; 1 bf16 so far
  std::vector<int> readers(nt, 0);
  for (const std::unique_ptr<NodeExec>& ne : nodes_) {
    const NodeInfo& n = *ne->node;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      verdict[n.outputs[k]] = Bit(ne->kernel->bf16_act_outputs, k) ? 1 : 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      ++readers[n.inputs[k]];
      if (!Bit(ne->kernel->bf16_act_inputs, k)) verdict[n.inputs[k]] = 0;
    }
  }
  for (int t = 0; t < nt; ++t) {
    if (g.tensors[t].role != TensorRole::kActivation || t == g.loss || verdict[t] != 1 ||
        readers[t] == 0 || specs_[t].dtype != DType::kF32)
      continue;
    specs_[t].dtype = DType::kBF16;
    ++bf16_acts_;
    bf16_act_bytes_ += specs_[t].nbytes();
  }
}

void Executor::ChooseBf16Grads() {
  const Graph& g = *graph_;
  if (!Bf16Step() || opt_.split_backward) return;
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> writes(nt, 0);      // fresh bf16 gradient writes its readers offer
  std::vector<int> reads(nt, 0);       // times the tensor is read at all
  std::vector<bool> taker(nt, false);  // its writer's backward reads the gradient in bf16
  for (const std::unique_ptr<NodeExec>& ne : nodes_) {
    const NodeInfo& n = *ne->node;
    const kernels::Kernel& k = *ne->kernel;
    for (size_t i = 0; i < n.outputs.size(); ++i) taker[n.outputs[i]] = Bit(k.bf16_grad_outputs, i);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int t = n.inputs[i];
      ++reads[t];
      if (k.overwrites_fresh_grads && Bit(k.bf16_grad_inputs, i) &&
          !Bit(ne->def->non_differentiable_inputs, i))
        ++writes[t];
    }
  }
  for (int t = 0; t < nt; ++t)
    if (g.tensors[t].role == TensorRole::kActivation && t != g.loss && taker[t] && reads[t] == 1 &&
        writes[t] == 1 && grad_specs_[t].dtype == DType::kF32)
      grad_specs_[t].dtype = DType::kBF16;
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
