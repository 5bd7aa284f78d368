#include "parallel/expert/moe_overlap.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace ds::parallel {

namespace {

// One PR-MoE layer: its dispatch and exchange nodes, and the dense branch [begin, end) that
// moves between them (old node indices).
struct Branch {
  int dispatch = -1, exchange = -1, begin = 0, end = 0;
  int buffer = -1;  // the dispatched tokens the exchange sends
};

std::vector<int> Producers(const Graph& g) {
  std::vector<int> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int t : g.nodes[i].outputs) producer[t] = static_cast<int>(i);
  return producer;
}

// The branch of the residual mix at node `mix`, if the layer fits the pattern: the nodes between
// the expert path's last node and the mix read nothing the path computes, and share its block.
bool FindBranch(const Graph& g, const std::vector<int>& producer, int mix, Branch* b) {
  const int last = producer[g.nodes[mix].inputs[0]];
  int d = last;
  while (d >= 0 && g.nodes[d].op != "moe_dispatch") --d;
  const int n = static_cast<int>(g.nodes.size());
  if (d < 0 || d + 1 >= n || last + 1 >= mix) return false;
  const NodeInfo& x = g.nodes[d + 1];
  if (x.op != "moe_all_to_all" || x.inputs[0] != g.nodes[d].outputs[0]) return false;
  for (int k = last + 1; k < mix; ++k) {
    if (g.nodes[k].block != g.nodes[d].block) return false;
    for (int t : g.nodes[k].inputs)
      if (producer[t] >= d && producer[t] <= last) return false;
  }
  *b = {d, d + 1, last + 1, mix, x.inputs[0]};
  return true;
}

// Forward cuts sit after node boundary - 1, backward ones after the backward of node boundary.
void MoveCuts(const std::vector<int>& new_index, int n, std::vector<TpCollective>* cuts) {
  for (TpCollective& c : *cuts) {
    if (c.backward)
      c.boundary = c.boundary >= n ? n : new_index[c.boundary];
    else
      c.boundary = c.boundary <= 0 ? 0 : new_index[c.boundary - 1] + 1;
  }
}

// The exchange's two cuts get their windows over the moved branch.
void OpenWindow(const Branch& b, const std::vector<int>& new_index,
                std::vector<TpCollective>* cuts) {
  const int buffer = b.buffer;
  const int post = new_index[b.dispatch] + 1, done = new_index[b.exchange] + 1;
  for (TpCollective& c : *cuts) {
    if (c.kind != TpCollective::kAllToAll) continue;
    if (!c.backward && c.tensor == buffer && c.boundary == done) {
      c.boundary = post;
      c.wait = done;
    } else if (c.backward && c.out == buffer && c.boundary == done - 1) {
      c.wait = post;
    }
  }
}

}  // namespace

int OverlapSharedExperts(TpLocalGraph* local) {
  Graph& g = local->graph;
  const int n = static_cast<int>(g.nodes.size());
  const std::vector<int> producer = Producers(g);
  std::vector<Branch> branches;
  for (int i = 0; i < n; ++i) {
    Branch b;
    if (g.nodes[i].op == "moe_residual_mix" && FindBranch(g, producer, i, &b))
      branches.push_back(b);
  }
  if (branches.empty()) return 0;
  std::vector<int> order(n);  // old indices in the new order
  std::iota(order.begin(), order.end(), 0);
  for (const Branch& b : branches) {
    auto first = std::find(order.begin(), order.end(), b.begin);
    std::vector<int> moved(first, first + (b.end - b.begin));
    order.erase(first, first + (b.end - b.begin));
    order.insert(std::find(order.begin(), order.end(), b.exchange), moved.begin(), moved.end());
  }
  std::vector<int> new_index(n);
  for (int k = 0; k < n; ++k) new_index[order[k]] = k;
  std::vector<NodeInfo> nodes;
  nodes.reserve(n);
  for (int k = 0; k < n; ++k) nodes.push_back(std::move(g.nodes[order[k]]));
  g.nodes = std::move(nodes);
  MoveCuts(new_index, n, &local->collectives);
  for (const Branch& b : branches) OpenWindow(b, new_index, &local->collectives);
  // Forward cuts in node order, then backward ones, as ep_graph.h leaves them.
  std::stable_sort(local->collectives.begin(), local->collectives.end(),
                   [](const TpCollective& a, const TpCollective& b) {
                     if (a.backward != b.backward) return !a.backward;
                     return a.backward ? a.boundary > b.boundary : a.boundary < b.boundary;
                   });
  return static_cast<int>(branches.size());
}

void CloseOverlapWindows(TpLocalGraph* local) {
  for (TpCollective& c : local->collectives) c.wait = -1;
}

}  // namespace ds::parallel
