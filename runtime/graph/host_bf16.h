// Note [bf16 activations]
// Which activations and activation gradients a bf16 step on the host stores in bf16, from what
// the host kernels declare (kernels/op.h's HostBf16: the executor passes its kernels' flags, the
// planner the op definitions', which kernels/cpu's op_def_test holds equal). The executor stores
// them so; the planner counts them so, so the plan's activation bytes are what the executor
// allocates, and the planner links no kernels.
//
// An activation is stored in bf16 where the kernel that writes it declares that output
// (act_outputs) and every kernel that reads it declares that input (act_inputs): a linear layer's
// output into a GeLU, the GeLU's into the next linear, a norm's output into a linear, the logits
// into cross-entropy. It is what autocast keeps: the products' outputs rounded once to bf16; the
// residual stream, which the norms read, stays fp32, and so does every tensor an op without bf16
// reads touches (the plan's collectives work on those: tensor-parallel all-reduces, pipeline
// sends). A gradient is stored in bf16 where it is written once, whole: the activation has one
// reader, which reads it once and writes its gradient fresh in bf16 (grad_inputs with
// overwrites_fresh_grads), and the kernel that wrote the activation reads that gradient in bf16
// (grad_outputs): the logits' gradient into the last linear layer's backward, a linear
// layer's input gradient into a norm's or a GeLU's. Gradients that sum over several readers (the
// residual stream's) stay fp32. Whole backwards only (not split, zb-h1).
#pragma once

#include <vector>

#include "kernels/registry.h"
#include "runtime/graph/graph.h"

namespace ds {

// Every node's declaration from its op definition, in node order (an unknown op declares none).
std::vector<kernels::HostBf16> OpHostBf16(const Graph& graph);

// Per tensor: stored in bf16. `flags` per node; `fp32` per tensor: whether its spec is fp32 (only
// those can be).
std::vector<bool> Bf16Activations(const Graph& graph, const std::vector<kernels::HostBf16>& flags,
                                  const std::vector<bool>& fp32);
std::vector<bool> Bf16Gradients(const Graph& graph, const std::vector<kernels::HostBf16>& flags,
                                const std::vector<bool>& fp32);

}  // namespace ds
