#include "runtime/planner/node_costs.h"

#include <algorithm>

#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"

namespace ds::planner {
namespace {

// Bytes a node reads and writes, its tensors stored as `act` (integer tensors as they are). A
// lookup (embedding) reads only the rows it writes, not its whole table.
double NodeBytes(const NodeInfo& node, const std::vector<TensorSpec>& specs, DType act) {
  double bytes = 0;
  const bool lookup = node.op.find("embedding") != std::string::npos;
  for (const std::vector<int>* list : {&node.inputs, &node.outputs}) {
    if (lookup && list == &node.inputs) continue;
    for (int t : *list) {
      const TensorSpec& s = specs[t];
      bytes += static_cast<double>(s.numel()) *
               (s.dtype == DType::kF32 ? DTypeSize(act) : DTypeSize(s.dtype));
    }
  }
  return lookup ? 2 * bytes : bytes;
}

// linear: x [..., K] times W [N, K]: forward m x n x k = tokens x N x K; backward dx (tokens x
// K x N) and dW (N x K x tokens).
void CostLinear(const std::vector<TensorSpec>& in, DType matmul, const HostRates& r, double* fwd,
                double* bwd) {
  const int64_t n = in[1].shape[0], k = in[1].shape[1];
  const int64_t m = in[0].numel() / std::max<int64_t>(k, 1);
  const double flops = 2.0 * m * n * k;
  *fwd = flops / (r.GemmGflops(matmul, m, n, k) * 1e9);
  *bwd =
      flops / (r.GemmGflops(matmul, m, k, n) * 1e9) + flops / (r.GemmGflops(matmul, n, k, m) * 1e9);
}

// attention: per (batch, head) Q K^T (T x T x D) and P V (T x D x T). The CPU kernel multiplies
// every key of each query block (the causal half is masked after), so twice the OpDef's causal
// count; the softmax's T x T scores are memory traffic.
void CostAttention(const NodeInfo& node, const std::vector<TensorSpec>& in, DType matmul,
                   const HostRates& r, double* fwd, double* bwd) {
  const int64_t heads = node.attrs.Int("n_head", 1);
  const int64_t kv = node.attrs.Int("n_kv_head", heads);
  const Shape& s = in[0].shape;  // [B, T, (H + 2 KV) D]
  const int64_t b = s[0], t = s[1], d = s.back() / std::max<int64_t>(heads + 2 * kv, 1);
  const double product = 2.0 * b * heads * t * t * d;  // one of the two, every key
  const double rate = r.GemmGflops(matmul, t, t, d) * 1e9;
  const double scores = double(b) * heads * t * t * 4.0;  // fp32 scores, read and written
  *fwd = 2 * product / rate + 2 * scores / (r.stream_gbps * 1e9);
  *bwd = 4 * product / rate + 4 * scores / (r.stream_gbps * 1e9);
}

}  // namespace

double NodeCosts::Forward(int begin, int end) const {
  double s = 0;
  for (int n = std::max(begin, 0); n < end && n < static_cast<int>(forward.size()); ++n)
    s += forward[n];
  return s;
}

double NodeCosts::Backward(int begin, int end) const {
  double s = 0;
  for (int n = std::max(begin, 0); n < end && n < static_cast<int>(backward.size()); ++n)
    s += backward[n];
  return s;
}

StatusOr<NodeCosts> CostNodes(const Graph& graph, int64_t micro_batch, int64_t seq_len,
                              DType matmul, DType act, const HostRates& rates) {
  DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs,
                      InferTensorSpecs(graph,
                                       {{"batch", std::max<int64_t>(1, micro_batch)},
                                        {"seq", std::max<int64_t>(1, seq_len)}},
                                       graph.name));
  NodeCosts c;
  const size_t n = graph.nodes.size();
  c.forward.assign(n, 0);
  c.backward.assign(n, 0);
  c.gemm.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const NodeInfo& node = graph.nodes[i];
    std::vector<TensorSpec> in;
    for (int t : node.inputs) in.push_back(specs[t]);
    if (node.op == "linear" && in.size() >= 2 && in[1].shape.size() == 2) {
      CostLinear(in, matmul, rates, &c.forward[i], &c.backward[i]);
      c.gemm[i] = true;
    } else if (node.op == "attention" && !in.empty() && in[0].shape.size() == 3) {
      CostAttention(node, in, matmul, rates, &c.forward[i], &c.backward[i]);
      c.gemm[i] = true;
    } else {
      const double seconds = NodeBytes(node, specs, act) / (rates.stream_gbps * 1e9);
      c.forward[i] = seconds;
      c.backward[i] = 2 * seconds;
    }
  }
  return c;
}

}  // namespace ds::planner
