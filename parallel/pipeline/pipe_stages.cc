#include "parallel/pipeline/pipe_stages.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <regex>
#include <set>
#include <utility>

#include "kernels/registry.h"
#include "runtime/graph/validate.h"

namespace ds::parallel {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// Per block position (embeddings, blocks 0..L-1, head): the nodes and the parameter elements.
struct Units {
  std::vector<int> node_begin, node_end;  // by position b + 1
  std::vector<int64_t> params;
  std::vector<std::set<int>> read;  // the parameters each position's nodes read
};

int64_t Elements(const TensorInfo& t) {
  int64_t e = 1;
  for (const Dim& d : t.shape) e *= d.size;
  return e;
}

StatusOr<Units> GroupUnits(const Graph& g) {
  const int positions = g.num_blocks + 2;
  Units u;
  u.node_begin.assign(positions, -1);
  u.node_end.assign(positions, -1);
  u.params.assign(positions, 0);
  u.read.resize(positions);
  int last = -2;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const int b = g.nodes[n].block;
    if (b < -1 || b > g.num_blocks || b < last)
      return InvalidArgumentError("pipeline: graph " + g.name + " node \"" + g.nodes[n].name +
                                  "\" of block " + Str(b) + " is out of block order");
    last = b;
    if (u.node_begin[b + 1] < 0) u.node_begin[b + 1] = n;
    u.node_end[b + 1] = n + 1;
    for (int t : g.nodes[n].inputs)
      if (g.tensors[t].role == TensorRole::kParam && u.read[b + 1].insert(t).second)
        u.params[b + 1] += Elements(g.tensors[t]);
  }
  return u;
}

// Per node: its forward and backward FLOPs for one micro-batch of (micro_batch, seq_len), from
// the OpDefs.
StatusOr<std::vector<double>> NodeFlops(const Graph& g, int64_t micro_batch, int64_t seq_len) {
  if (seq_len <= 0 && g.config.count("max_seq_len")) seq_len = g.config.at("max_seq_len");
  auto specs = InferTensorSpecs(
      g, {{"batch", std::max<int64_t>(1, micro_batch)}, {"seq", std::max<int64_t>(1, seq_len)}},
      g.name);
  if (!specs.ok()) return specs.status();
  std::vector<double> f(g.nodes.size(), 0);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const kernels::OpDef* def = kernels::FindOp(g.nodes[n].op);
    if (!def) return InvalidArgumentError("pipeline: op " + g.nodes[n].op + " is not registered");
    std::vector<TensorSpec> in;
    for (int t : g.nodes[n].inputs) in.push_back((*specs)[t]);
    if (def->forward_flops) f[n] += def->forward_flops(g.nodes[n].attrs, in);
    if (def->backward_flops) f[n] += def->backward_flops(g.nodes[n].attrs, in);
  }
  return f;
}

// Per block position: the FLOPs of its nodes.
StatusOr<std::vector<int64_t>> Flops(const Graph& g, const Units& u, int64_t micro_batch,
                                     int64_t seq_len) {
  auto nodes = NodeFlops(g, micro_batch, seq_len);
  if (!nodes.ok()) return nodes.status().WithPrefix("pipeline.partition_method flops");
  std::vector<int64_t> f(u.node_begin.size(), 0);
  for (size_t b = 0; b < f.size(); ++b)
    for (int n = u.node_begin[b]; n >= 0 && n < u.node_end[b]; ++n)
      f[b] += static_cast<int64_t>((*nodes)[n]);
  return f;
}

// The block weights partition_method balances; InvalidArgument for a method it does not know.
StatusOr<std::vector<int64_t>> Weights(const Graph& g, const Units& u, const std::string& method,
                                       const std::vector<int64_t>& flops) {
  const int L = g.num_blocks;
  std::vector<int64_t> w(L, 1);
  if (method == "parameters" || method == "flops") {
    for (int b = 0; b < L; ++b) w[b] = method == "flops" ? flops[b + 1] : u.params[b + 1];
    return w;
  }
  if (method == "uniform") return w;
  if (method.rfind("type:", 0) != 0)
    return InvalidArgumentError("pipeline.partition_method \"" + method +
                                "\" must be parameters, flops, uniform or type:REGEX");
  std::regex re;
  try {
    re = std::regex(method.substr(5), std::regex::icase | std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgumentError("pipeline.partition_method \"" + method + "\": bad regex (" +
                                e.what() + ")");
  }
  for (int b = 0; b < L; ++b) {
    w[b] = 0;
    for (int n = u.node_begin[b + 1]; n >= 0 && n < u.node_end[b + 1]; ++n)
      if (std::regex_search(g.nodes[n].name, re) || std::regex_search(g.nodes[n].op, re)) w[b] = 1;
  }
  return w;
}

// Ends of the k parts of w[0..n) (each at least one item; `head` added to the first part,
// `tail` to the last) with the smallest largest part, then the smallest sum of squares (the
// stages below the largest as even as they can be); ties give later parts more items.
std::vector<int> Balance(const std::vector<int64_t>& w, int k, int64_t head, int64_t tail) {
  const int n = static_cast<int>(w.size());
  std::vector<int64_t> pre(n + 1, 0);
  for (int i = 0; i < n; ++i) pre[i + 1] = pre[i] + w[i];
  using Cost = std::pair<int64_t, double>;  // largest part, sum of squares
  const Cost none{std::numeric_limits<int64_t>::max(), 0};
  // best[j][i]: splitting the items [i, n) into parts j..k-1.
  std::vector<std::vector<Cost>> best(k + 1, std::vector<Cost>(n + 1, none));
  std::vector<std::vector<int>> cut(k + 1, std::vector<int>(n + 1, -1));
  best[k][n] = {0, 0};
  for (int j = k - 1; j >= 0; --j)
    for (int i = j; i <= n - (k - j); ++i)
      for (int e = i + 1; e <= n - (k - j - 1); ++e) {  // part j is [i, e); the first e wins ties
        const Cost& rest = best[j + 1][e];
        if (rest == none) continue;
        const int64_t part = pre[e] - pre[i] + (j == 0 ? head : 0) + (j == k - 1 ? tail : 0);
        const Cost c{std::max(part, rest.first),
                     rest.second + static_cast<double>(part) * static_cast<double>(part)};
        if (c < best[j][i]) {
          best[j][i] = c;
          cut[j][i] = e;
        }
      }
  std::vector<int> ends;
  for (int j = 0, i = 0; j < k; ++j) ends.push_back(i = cut[j][i]);
  return ends;
}

}  // namespace

StatusOr<std::vector<PipelineStage>> PartitionStages(const Graph& g, int stages,
                                                     const std::string& method, int64_t micro_batch,
                                                     int64_t seq_len) {
  const int L = g.num_blocks;
  if (stages < 1) return InvalidArgumentError("pipeline: " + Str(stages) + " stages");
  if (stages > L)
    return InvalidArgumentError("pipeline: " + Str(stages) + " stages (parallel.pipeline x " +
                                "pipeline.virtual_stages) but graph " + g.name + " has " + Str(L) +
                                " transformer blocks; each stage needs one");
  auto units = GroupUnits(g);
  if (!units.ok()) return units.status();
  std::vector<int64_t> flops;
  if (method == "flops") {
    auto f = Flops(g, *units, micro_batch, seq_len);
    if (!f.ok()) return f.status();
    flops = std::move(f).value();
  }
  auto weights = Weights(g, *units, method, flops);
  if (!weights.ok()) return weights.status();
  const bool params = method == "parameters", by_flops = method == "flops";
  // The embeddings and the head count with the first and last stage.
  const int64_t head = params ? units->params[0] : by_flops ? flops[0] : 0;
  const int64_t tail = params ? units->params[L + 1] : by_flops ? flops[L + 1] : 0;
  const std::vector<int> ends = Balance(*weights, stages, head, tail);
  std::vector<PipelineStage> out;
  for (int s = 0, b = 0; s < stages; b = ends[s++]) {
    PipelineStage st;
    st.first_block = s == 0 ? -1 : b;
    st.last_block = s == stages - 1 ? L : ends[s] - 1;
    std::set<int> held;  // a tied embedding once per stage (each end stage holds a copy)
    for (int u = st.first_block; u <= st.last_block; ++u) {
      held.insert(units->read[u + 1].begin(), units->read[u + 1].end());
      if (u >= 0 && u < L) st.weight += (*weights)[u];
    }
    for (int t : held) st.parameters += Elements(g.tensors[t]);
    if (params) st.weight = st.parameters;
    if (by_flops) st.weight += (s == 0 ? head : 0) + (s == stages - 1 ? tail : 0);
    if (!params && st.weight == 0)
      return InvalidArgumentError(
          "pipeline.partition_method \"" + method + "\" leaves stage " + Str(s) + " of " +
          Str(stages) + " without a matching block (" +
          Str(std::count_if(weights->begin(), weights->end(), [](int64_t x) { return x > 0; })) +
          " of " + Str(L) + " blocks match)");
    st.node_begin = units->node_begin[st.first_block + 1];
    for (int u = st.last_block; u >= st.first_block && st.node_end <= 0; --u)
      st.node_end = units->node_end[u + 1];
    if (st.node_begin < 0)  // no embeddings: the stage starts at its first block's nodes
      for (int u = st.first_block; u <= st.last_block && st.node_begin < 0; ++u)
        st.node_begin = units->node_begin[u + 1];
    out.push_back(st);
  }
  return out;
}

StatusOr<double> GraphFlops(const Graph& graph, int64_t micro_batch, int64_t seq_len) {
  auto nodes = NodeFlops(graph, micro_batch, seq_len);
  if (!nodes.ok()) return nodes.status();
  double sum = 0;
  for (double f : *nodes) sum += f;
  return sum;
}

std::string FormatStages(const std::vector<PipelineStage>& stages, int num_blocks) {
  std::string out;
  for (size_t s = 0; s < stages.size(); ++s) {
    const PipelineStage& st = stages[s];
    const int from = std::max(st.first_block, 0), to = std::min(st.last_block, num_blocks - 1);
    std::string what = st.first_block < 0 ? "embeddings + " : "";
    what += from == to ? "block " + Str(from) : "blocks " + Str(from) + "-" + Str(to);
    if (st.last_block >= num_blocks) what += " + head and loss";
    char line[160];
    std::snprintf(line, sizeof line, "  stage %zu: %-40s %8.2f M parameters\n", s, what.c_str(),
                  st.parameters / 1e6);
    out += line;
  }
  return out;
}

}  // namespace ds::parallel
