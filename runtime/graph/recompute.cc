#include "runtime/graph/recompute.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/registry.h"
#include "runtime/graph/activation_grads.h"

namespace ds {
namespace {

// Per tensor: the nodes that read it in forward, and those whose backward reads it.
struct Readers {
  std::vector<std::vector<int>> forward, backward;
  std::vector<int> producer;
};

Readers FindReaders(const Graph& g) {
  Readers r;
  const size_t nt = g.tensors.size();
  r.forward.resize(nt);
  r.backward.resize(nt);
  r.producer.assign(nt, -1);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const NodeInfo& node = g.nodes[n];
    const kernels::OpDef* def = kernels::FindOp(node.op);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      r.forward[node.inputs[i]].push_back(n);
      if (def && ((def->backward_reads_inputs >> i) & 1u)) r.backward[node.inputs[i]].push_back(n);
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      r.producer[node.outputs[i]] = n;
      if (def && ((def->backward_reads_outputs >> i) & 1u))
        r.backward[node.outputs[i]].push_back(n);
    }
  }
  return r;
}

// Fills segment s's transient tensors; `next_begin`: where the next segment starts.
void FindTransient(const Graph& g, const Readers& r, int next_begin, RecomputeSegment* s) {
  for (int n = s->node_begin; n < s->node_end; ++n)
    for (int t : g.nodes[n].outputs) {
      if (g.tensors[t].role != TensorRole::kActivation || t == g.loss) continue;
      bool ok = true;
      for (int c : r.forward[t]) ok = ok && c >= s->node_begin && c < s->point && c < next_begin;
      for (int c : r.backward[t]) ok = ok && c >= s->node_begin && c < s->point;
      if (ok) s->transient.push_back(t);
    }
}

}  // namespace

const char* RecomputeModeName(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kSelective:
      return "selective";
    case RecomputeMode::kFull:
      return "full";
    case RecomputeMode::kNone:
      break;
  }
  return "none";
}

bool ParseRecomputeMode(const std::string& text, RecomputeMode* mode) {
  for (RecomputeMode m : {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull})
    if (text == RecomputeModeName(m)) {
      *mode = m;
      return true;
    }
  return false;
}

namespace {

bool IsPipeNode(const NodeInfo& n) { return n.op == "pipe_recv" || n.op == "pipe_send"; }

// A segment of node n alone, recomputed just before the backward of the last node whose
// backward reads its output.
RecomputeSegment Single(const Readers& r, const Graph& g, int n) {
  int point = n + 1;
  for (int t : g.nodes[n].outputs)
    for (int c : r.backward[t]) point = std::max(point, c + 1);
  return {n, n + 1, point, {}};
}

}  // namespace

StatusOr<std::vector<RecomputeSegment>> RecomputeSegments(const Graph& g, RecomputeMode mode) {
  std::vector<RecomputeSegment> out;
  const Readers r = FindReaders(g);
  const int nodes = static_cast<int>(g.nodes.size());
  if (mode == RecomputeMode::kFull) {
    for (int n = 0; n < nodes;) {
      const int block = g.nodes[n].block;
      int end = n;
      while (end < nodes && g.nodes[end].block == block) ++end;
      // A pipeline stage's pipe_recv / pipe_send nodes at the block's ends stay out: the plan's
      // RECVs fill their tensors, which a recompute must not overwrite.
      int b = n, e = end;
      while (b < e && IsPipeNode(g.nodes[b])) ++b;
      while (e > b && IsPipeNode(g.nodes[e - 1])) --e;
      if (block >= 0 && block < g.num_blocks && b < e) out.push_back({b, e, e, {}});
      n = end;
    }
  }
  bool attention = false;
  for (int n = 0; n < nodes && mode != RecomputeMode::kFull; ++n) {
    const bool att = mode == RecomputeMode::kSelective && g.nodes[n].op == "attention";
    attention = attention || att;
    // Sequence parallelism keeps a column-parallel linear's input as its token chunk and
    // gathers it again in backward (Megatron-SP): its sp_gather is a segment whatever the mode.
    if (att || g.nodes[n].op == "sp_gather") out.push_back(Single(r, g, n));
  }
  if (mode == RecomputeMode::kSelective && !attention)
    return InvalidArgumentError("training.recompute selective: graph " + g.name +
                                " has no attention node to recompute");
  for (size_t i = 0; i < out.size(); ++i)
    FindTransient(g, r, i + 1 < out.size() ? out[i + 1].node_begin : nodes, &out[i]);
  return out;
}

namespace {

// Whether input `t` of segment `s` may be kept as slices over `parts` ranks.
bool Partitionable(const Graph& g, const Readers& r, const std::vector<bool>& replicated, int parts,
                   const RecomputeSegment& s, int t) {
  if (g.tensors[t].role != TensorRole::kActivation || t == g.loss) return false;
  if (t >= static_cast<int>(replicated.size()) || !replicated[t]) return false;
  // The segment's backward directly follows its recompute (a block under full recompute), so
  // the gathered tensor is live only while the segment's own nodes run in backward.
  if (s.point != s.node_end || r.producer[t] < 0 || r.producer[t] >= s.node_begin) return false;
  auto inside = [&s](int n) { return n >= s.node_begin && n < s.node_end; };
  for (int c : r.forward[t])
    if (!inside(c)) return false;
  for (int c : r.backward[t])
    if (!inside(c)) return false;
  int64_t fixed = 1;
  for (const Dim& d : g.tensors[t].shape)
    if (d.symbol.empty()) fixed *= d.size;
  return fixed % parts == 0;
}

}  // namespace

int PartitionCheckpoints(const Graph& g, const std::vector<bool>& replicated, int parts,
                         std::vector<RecomputeSegment>* segments) {
  if (parts <= 1) return 0;
  const Readers r = FindReaders(g);
  int marked = 0;
  for (RecomputeSegment& s : *segments) {
    s.parts = parts;
    std::set<int> seen;
    for (int n = s.node_begin; n < s.node_end; ++n)
      for (int t : g.nodes[n].inputs)
        if (seen.insert(t).second && Partitionable(g, r, replicated, parts, s, t)) {
          s.partitioned.push_back(t);
          ++marked;
        }
  }
  return marked;
}

int OffloadCheckpoints(const Graph& g, std::vector<RecomputeSegment>* segments) {
  const Readers r = FindReaders(g);
  const std::vector<bool> any(g.tensors.size(), true);  // whole tensors: no replication needed
  int marked = 0;
  for (RecomputeSegment& s : *segments) {
    if (!s.partitioned.empty()) continue;  // partition_activations chose already
    std::set<int> seen;
    for (int n = s.node_begin; n < s.node_end; ++n)
      for (int t : g.nodes[n].inputs)
        if (seen.insert(t).second && Partitionable(g, r, any, 1, s, t)) {
          s.partitioned.push_back(t);
          ++marked;
        }
    if (!s.partitioned.empty()) {
      s.parts = 1;
      s.on_host = true;
    }
  }
  return marked;
}

std::vector<bool> KeptTensors(const Graph& g, const std::vector<RecomputeSegment>& segments) {
  const Readers r = FindReaders(g);
  std::vector<bool> kept(g.tensors.size(), false), transient(g.tensors.size(), false);
  std::vector<bool> partitioned(g.tensors.size(), false);
  for (const RecomputeSegment& s : segments) {
    for (int t : s.transient) transient[t] = true;
    for (int t : s.partitioned) partitioned[t] = true;
  }
  for (size_t t = 0; t < kept.size(); ++t) kept[t] = !r.backward[t].empty() && !transient[t];
  for (const RecomputeSegment& s : segments)
    for (int n = s.node_begin; n < s.node_end; ++n)
      for (int t : g.nodes[n].inputs) {
        const int p = r.producer[t];
        if (g.tensors[t].role == TensorRole::kActivation && (p < s.node_begin || p >= s.node_end))
          kept[t] = true;
      }
  for (size_t t = 0; t < kept.size(); ++t)
    if (partitioned[t]) kept[t] = false;
  return kept;
}

ForwardOnlyPlacement PlaceForwardOnly(const Graph& g, const std::vector<RecomputeSegment>& segments,
                                      const std::vector<int64_t>& bytes) {
  const int nt = static_cast<int>(g.tensors.size());
  const std::vector<bool> kept = KeptTensors(g, segments);
  std::vector<bool> transient(nt, false);
  for (const RecomputeSegment& s : segments)
    for (int t : s.transient) transient[t] = true;
  std::vector<int> producer(nt, -1), last_use(nt, -1);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    for (int t : g.nodes[n].inputs) last_use[t] = n;
    for (int t : g.nodes[n].outputs)
      if (producer[t] < 0) producer[t] = n;
  }
  for (const RecomputeSegment& s : segments)
    for (int t : s.partitioned) last_use[t] = std::max(last_use[t], s.node_end - 1);
  WidenExchanges(g, &producer, &last_use);
  ForwardOnlyPlacement out;
  std::vector<int> order;
  for (int t = 0; t < nt; ++t)
    if (g.tensors[t].role == TensorRole::kActivation && !kept[t] && !transient[t] && t != g.loss &&
        producer[t] >= 0 && last_use[t] >= 0)
      order.push_back(t);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return producer[a] < producer[b]; });
  out.offset.assign(nt, -1);
  out.bytes = PlaceFirstFit(order, producer, last_use, bytes, &out.offset);
  return out;
}

void WidenExchanges(const Graph& graph, std::vector<int>* first, std::vector<int>* last) {
  for (const NodeInfo& n : graph.nodes) {
    const kernels::OpDef* def = kernels::FindOp(n.op);
    if (!def || !def->exchange || n.inputs.empty() || n.outputs.empty()) continue;
    const int a = n.inputs[0], b = n.outputs[0];
    if ((*first)[a] < 0 || (*first)[b] < 0 || (*last)[a] < 0 || (*last)[b] < 0) continue;
    (*first)[a] = (*first)[b] = std::min((*first)[a], (*first)[b]);
    (*last)[a] = (*last)[b] = std::max((*last)[a], (*last)[b]);
  }
}

bool InSegment(const std::vector<RecomputeSegment>& segments, int n) {
  for (const RecomputeSegment& s : segments)
    if (n >= s.node_begin && n < s.node_end) return true;
  return false;
}

}  // namespace ds
