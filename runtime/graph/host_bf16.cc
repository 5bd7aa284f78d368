#include "runtime/graph/host_bf16.h"

namespace ds {
namespace {

bool Bit(uint32_t mask, size_t k) { return k < 32 && (mask >> k & 1u); }

}  // namespace

std::vector<kernels::HostBf16> OpHostBf16(const Graph& graph) {
  std::vector<kernels::HostBf16> out;
  for (const NodeInfo& n : graph.nodes) {
    const kernels::OpDef* def = kernels::FindOp(n.op);
    out.push_back(def ? def->host_bf16 : kernels::HostBf16{});
  }
  return out;
}

std::vector<bool> Bf16Activations(const Graph& g, const std::vector<kernels::HostBf16>& flags,
                                  const std::vector<bool>& fp32) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> verdict(nt, -1);  // -1 no writer seen; 0 fp32; 1 bf16 so far
  std::vector<int> readers(nt, 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeInfo& n = g.nodes[i];
    for (size_t k = 0; k < n.outputs.size(); ++k)
      verdict[n.outputs[k]] = Bit(flags[i].act_outputs, k) ? 1 : 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      ++readers[n.inputs[k]];
      if (!Bit(flags[i].act_inputs, k)) verdict[n.inputs[k]] = 0;
    }
  }
  std::vector<bool> bf16(nt, false);
  for (int t = 0; t < nt; ++t)
    bf16[t] = g.tensors[t].role == TensorRole::kActivation && t != g.loss && verdict[t] == 1 &&
              readers[t] > 0 && fp32[t];
  return bf16;
}

std::vector<bool> Bf16Gradients(const Graph& g, const std::vector<kernels::HostBf16>& flags,
                                const std::vector<bool>& fp32) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> writes(nt, 0);      // fresh bf16 gradient writes its readers offer
  std::vector<int> reads(nt, 0);       // times the tensor is read at all
  std::vector<bool> taker(nt, false);  // its writer's backward reads the gradient in bf16
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeInfo& n = g.nodes[i];
    const kernels::HostBf16& k = flags[i];
    const kernels::OpDef* def = kernels::FindOp(n.op);
    const uint32_t non_diff = def ? def->non_differentiable_inputs : 0;
    for (size_t j = 0; j < n.outputs.size(); ++j) taker[n.outputs[j]] = Bit(k.grad_outputs, j);
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const int t = n.inputs[j];
      ++reads[t];
      if (k.overwrites_fresh_grads && Bit(k.grad_inputs, j) && !Bit(non_diff, j)) ++writes[t];
    }
  }
  std::vector<bool> bf16(nt, false);
  for (int t = 0; t < nt; ++t)
    bf16[t] = g.tensors[t].role == TensorRole::kActivation && t != g.loss && taker[t] &&
              reads[t] == 1 && writes[t] == 1 && fp32[t];
  return bf16;
}

}  // namespace ds
