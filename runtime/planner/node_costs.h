// The cost model's compute part: the seconds each node of a rank's graph takes forward and
// backward for one micro-batch on this host's rates (host_rates.h). Matrix products (linear;
// attention's two products per head) at the measured rate of their own shape and precision,
// from the OpDefs' FLOP counts; every other op as the bytes it reads and writes at the measured
// stream rate (forward once, backward twice: it reads the forward's tensors and the gradient).
//
//   DS_ASSIGN_OR_RETURN(NodeCosts c, CostNodes(graph, micro_batch, seq_len, DType::kBF16, rates));
//   double fwd = c.Forward(node_begin, node_end);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/core/dtype.h"
#include "runtime/graph/graph.h"
#include "runtime/planner/host_rates.h"

namespace ds::planner {

struct NodeCosts {
  std::vector<double> forward, backward;  // seconds, per node
  std::vector<bool> gemm;                 // a matrix product (else memory-bound)
  double Forward(int begin, int end) const;
  double Backward(int begin, int end) const;
};

// `matmul`: the products' precision (kBF16 where a bf16 job multiplies in bf16, else kF32);
// activations are stored in `act` (bf16 in a bf16 host step, else fp32).
StatusOr<NodeCosts> CostNodes(const Graph& graph, int64_t micro_batch, int64_t seq_len,
                              DType matmul, DType act, const HostRates& rates);

}  // namespace ds::planner
