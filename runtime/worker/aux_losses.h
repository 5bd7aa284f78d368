// AuxLosses: the MoE routers' load-balancing (aux) losses a graph computes
// (runtime/graph/moe_builder.h names them "<layer>.aux_loss"), read from an executor after a
// forward that ran to the loss (they stay alive until the loss node, the graph's last). The
// step's metric is their mean over every layer of every rank and micro-batch, so each rank
// reports a sum and a count (a pipeline stage: its own layers').
// The loss metric is the loss plus coeff x the aux losses; where a graph's objective carries a
// fraction of them (moe_loss's metric_scale: expert parallelism with tp, where the tp ranks'
// objectives add up to the mean of their chunks'), loss_correction() adds the rest.
//
//   AuxLosses aux(executor->graph());
//   aux.Add(*executor);        // after the forward
//   aux.sum(), aux.count();    // over the forwards added since the last Clear
#pragma once

#include <vector>

#include "runtime/exec/executor.h"

namespace ds::worker {

class AuxLosses {
 public:
  explicit AuxLosses(const Graph& graph);
  bool empty() const { return tensors_.empty(); }
  void Add(exec::Executor& e);
  double sum() const { return sum_; }
  int count() const { return count_; }
  double loss_correction() const { return extra_coeff_ * sum_; }
  void Clear() { sum_ = 0, count_ = 0; }

 private:
  std::vector<int> tensors_;
  double extra_coeff_ = 0;  // coeff x (metric_scale - 1)
  double sum_ = 0;
  int count_ = 0;
};

}  // namespace ds::worker
