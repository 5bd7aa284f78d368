#include "runtime/graph/activation_grads.h"

#include <algorithm>
#include <tuple>

#include "runtime/graph/recompute.h"

namespace ds {
namespace {

// The backward steps that open and close each activation gradient's interval.
void GradIntervals(const Graph& g, const std::vector<uint32_t>& non_diff, bool split_backward,
                   std::vector<int>* start, std::vector<int>* end) {
  const int n = static_cast<int>(g.nodes.size()), nt = static_cast<int>(g.tensors.size());
  start->assign(nt, -1);
  end->assign(nt, -1);
  for (int i = n - 1; i >= 0; --i) {
    const int step = n - 1 - i;
    const NodeInfo& node = g.nodes[i];
    for (int t : node.outputs) (*end)[t] = step;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int t = node.inputs[k];
      if (g.tensors[t].role != TensorRole::kActivation || (non_diff[i] & (1u << k))) continue;
      if ((*start)[t] < 0) (*start)[t] = step;
    }
  }
  (*start)[g.loss] = 0;
  WidenExchanges(g, start, end);  // an exchange's gradients may be in flight over both
  if (!split_backward) return;
  for (int i = 0; i < n; ++i) {
    bool has_params = false;
    for (int t : g.nodes[i].inputs)
      has_params = has_params || g.tensors[t].role == TensorRole::kParam;
    if (!has_params) continue;
    for (int t : g.nodes[i].outputs)
      if ((*end)[t] >= 0) (*end)[t] = n;
  }
}

}  // namespace

int64_t PlaceFirstFit(const std::vector<int>& order, const std::vector<int>& start,
                      const std::vector<int>& end, const std::vector<int64_t>& bytes,
                      std::vector<int64_t>* offset) {
  std::vector<std::tuple<int64_t, int64_t, int>> live;  // offset, size, end
  int64_t arena = 0;
  for (int t : order) {
    const int from = start[t];
    live.erase(std::remove_if(live.begin(), live.end(),
                              [from](const auto& b) { return std::get<2>(b) < from; }),
               live.end());
    std::sort(live.begin(), live.end());
    int64_t at = 0;
    for (const auto& [o, size, last] : live) {
      if (o >= at + bytes[t]) break;
      at = std::max(at, o + size);
    }
    (*offset)[t] = at;
    live.push_back({at, bytes[t], end[t]});
    arena = std::max(arena, at + bytes[t]);
  }
  return arena;
}

GradPlacement PlaceActivationGrads(const Graph& graph, const std::vector<uint32_t>& non_diff,
                                   bool split_backward, const std::vector<int64_t>& bytes) {
  GradPlacement p;
  std::vector<int> end;
  GradIntervals(graph, non_diff, split_backward, &p.start, &end);
  for (int t = 0; t < static_cast<int>(graph.tensors.size()); ++t)
    if (p.start[t] >= 0 && end[t] >= 0) p.order.push_back(t);
  std::stable_sort(p.order.begin(), p.order.end(),
                   [&](int a, int b) { return p.start[a] < p.start[b]; });
  p.offset.assign(graph.tensors.size(), -1);
  p.bytes = PlaceFirstFit(p.order, p.start, end, bytes, &p.offset);
  return p;
}

}  // namespace ds
