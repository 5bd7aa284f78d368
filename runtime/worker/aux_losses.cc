#include "runtime/worker/aux_losses.h"

#include <string>

namespace ds::worker {

AuxLosses::AuxLosses(const Graph& graph) {
  const std::string tail = ".aux_loss";
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const std::string& name = graph.tensors[i].name;
    if (graph.tensors[i].role == TensorRole::kActivation && name.size() > tail.size() &&
        name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      tensors_.push_back(static_cast<int>(i));
  }
  for (const NodeInfo& n : graph.nodes)
    if (n.op == "moe_loss")
      extra_coeff_ = n.attrs.Float("coeff", 0.0) * (n.attrs.Float("metric_scale", 1.0) - 1.0);
}

void AuxLosses::Add(exec::Executor& e) {
  for (int t : tensors_) sum_ += e.TensorData(t, false).f32()[0];
  count_ += static_cast<int>(tensors_.size());
}

}  // namespace ds::worker
