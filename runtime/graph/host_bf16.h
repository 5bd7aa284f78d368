// Note [bf16 activations]
// Which activations and activation gradients a bf16 step on the host stores in bf16, from the host
// kernels' declarations (kernels/registry.h's Kernel flags). The executor stores them so; the
// planner counts them so, from the same kernels, so the plan's activation bytes are what the
// executor allocates.
//
// An activation is stored in bf16 where the kernel that writes it declares that output
// (Kernel::bf16_act_outputs) and every kernel that reads it declares that input
// (bf16_act_inputs): a linear layer's output into a GeLU, the GeLU's into the next linear, a
// norm's output into a linear, the logits into cross-entropy. It is what autocast keeps: the
// products' outputs rounded once to bf16; the residual stream, which the norms read, stays fp32,
// and so does every tensor an op without bf16 reads touches (the plan's collectives work on
// those: tensor-parallel all-reduces, pipeline sends).
// A gradient is stored in bf16 where it is written once, whole: the activation has one reader,
// which reads it once and writes its gradient fresh in bf16 (bf16_grad_inputs with
// overwrites_fresh_grads), and the kernel that wrote the activation reads that gradient in bf16
// (bf16_grad_outputs): the logits' gradient into the last linear layer's backward, a linear
// layer's input gradient into a norm's or a GeLU's. Gradients that sum over several readers (the
// residual stream's) stay fp32. Whole backwards only (not split, zb-h1).
#pragma once

#include <vector>

#include "kernels/registry.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds {

// The host's fp32 kernel of every node (their bf16 declarations), in node order; an error naming
// the op when the host kernels are not linked into this binary.
StatusOr<std::vector<const kernels::Kernel*>> HostKernels(const Graph& graph);

// Per tensor: stored in bf16. `fp32` per tensor: whether its spec is fp32 (only those can be).
std::vector<bool> Bf16Activations(const Graph& graph,
                                  const std::vector<const kernels::Kernel*>& kernels,
                                  const std::vector<bool>& fp32);
std::vector<bool> Bf16Gradients(const Graph& graph,
                                const std::vector<const kernels::Kernel*>& kernels,
                                const std::vector<bool>& fp32);

}  // namespace ds
