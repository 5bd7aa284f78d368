#include "runtime/graph/lora.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/base/status_macros.h"

namespace ds {
namespace {

constexpr const char* kA = ".lora_A.weight";
constexpr const char* kB = ".lora_B.weight";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Appends the rewrite's tensors and nodes to a graph under construction.
class Rewriter {
 public:
  Rewriter(Graph* g, const LoraOptions& o, int64_t first_seed)
      : g_(g), o_(o), next_seed_(first_seed) {}

  // A tensor like activation `like` (its leading dimensions) with `width` features.
  int Activation(int like, const std::string& name, int64_t width) {
    TensorInfo t = g_->tensors[like];
    t.name = name;
    t.role = TensorRole::kActivation;
    t.init = {};
    t.sharding = ShardKind::kNone;
    if (!t.shape.empty()) t.shape.back() = Dim::Fixed(width);
    g_->tensors.push_back(std::move(t));
    return static_cast<int>(g_->tensors.size()) - 1;
  }

  int Param(const std::string& name, int64_t rows, int64_t cols, InitSpec init) {
    TensorInfo t;
    t.name = name;
    t.shape = {Dim::Fixed(rows), Dim::Fixed(cols)};
    t.role = TensorRole::kParam;
    t.init = init;
    t.sharding = ShardKind::kReplicated;
    g_->tensors.push_back(std::move(t));
    return static_cast<int>(g_->tensors.size()) - 1;
  }

  void Node(const std::string& op, const std::string& name, std::vector<int> in, int out, int block,
            kernels::Attrs attrs = {}) {
    NodeInfo n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    n.block = block;
    g_->nodes.push_back(std::move(n));
  }

  // The adapter of `t` on linear `base` (input x, weight [out, in]) added to `acc`; writes `out`.
  void Adapter(const NodeInfo& base, const LoraTarget& t, int64_t in, int acc, int out) {
    const int x = base.inputs[0], b = base.block;
    const int64_t w = t.end - t.begin;
    int src = x;
    if (o_.dropout > 0) {
      src = Activation(acc, t.module + ".lora_dropout", in);
      kernels::Attrs p;
      p.SetFloat("p", o_.dropout);
      Node("dropout", t.module + ".lora_dropout", {x}, src, b, p);
      g_->nodes.back().seed_id = next_seed_++;  // a stream of its own, after the base nodes'
    }
    InitSpec a;
    a.kind = InitSpec::kUniform;
    a.high = static_cast<float>(1.0 / std::sqrt(double(o_.bound_from_rank ? o_.r : in)));
    a.low = -a.high;
    const int pa = Param(t.module + kA, o_.r, in, a);
    const int pb = Param(t.module + kB, w, o_.r, InitSpec{});  // zeros: y' = y at the start
    const int down = Activation(acc, t.module + ".lora_A", o_.r);
    Node("linear", t.module + ".lora_A", {src, pa}, down, b);
    const int up = Activation(acc, t.module + ".lora_B", w);
    Node("linear", t.module + ".lora_B", {down, pb}, up, b);
    kernels::Attrs add;
    add.SetInt("begin", t.begin);
    add.SetFloat("scale", o_.scale);
    Node("column_add", t.module + ".lora", {acc, up}, out, b, add);
  }

 private:
  Graph* g_;
  const LoraOptions& o_;
  int64_t next_seed_;
};

Status CheckTarget(const Graph& g, const LoraTarget& t, const std::vector<LoraTarget>& same) {
  const std::string what = "LoRA: module " + t.module;
  if (t.node < 0 || t.node >= static_cast<int>(g.nodes.size()))
    return InvalidArgumentError(what + ": no such node");
  const NodeInfo& n = g.nodes[t.node];
  if (n.op != "linear" || n.inputs.size() < 2 || g.tensors[n.inputs[1]].role != TensorRole::kParam)
    return InvalidArgumentError(what + ": node " + n.name + " is not a linear layer with a weight");
  const int64_t out = g.tensors[n.inputs[1]].shape[0].size;
  if (t.begin < 0 || t.end <= t.begin || t.end > out)
    return InvalidArgumentError(what + ": features [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + ") are outside " + n.name + "'s " +
                                std::to_string(out));
  for (const LoraTarget& o : same)
    if (&o != &t && o.begin < t.end && t.begin < o.end)
      return InvalidArgumentError(what + " overlaps module " + o.module + " on " + n.name);
  return OkStatus();
}

}  // namespace

bool IsLoraParam(const std::string& name) { return EndsWith(name, kA) || EndsWith(name, kB); }

std::vector<LoraAdapter> FindAdapters(const Graph& g) {
  std::vector<int> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int t : g.nodes[i].outputs) producer[t] = static_cast<int>(i);
  std::vector<LoraAdapter> out;
  for (const NodeInfo& n : g.nodes) {
    if (n.op != "column_add" || !EndsWith(n.name, ".lora")) continue;
    LoraAdapter a;
    a.module = n.name.substr(0, n.name.size() - 5);
    a.a = a.module + kA;
    a.b = a.module + kB;
    a.begin = n.attrs.Int("begin", 0);
    a.scale = n.attrs.Float("scale", 1.0);
    int t = n.inputs[0];  // back through the other adapters of the same linear
    while (producer[t] >= 0 && g.nodes[producer[t]].op == "column_add")
      t = g.nodes[producer[t]].inputs[0];
    if (producer[t] < 0 || g.nodes[producer[t]].op != "linear") continue;
    a.base = g.tensors[g.nodes[producer[t]].inputs[1]].name;
    if (g.FindTensor(a.a) < 0 || g.FindTensor(a.b) < 0) continue;
    out.push_back(std::move(a));
  }
  return out;
}

void MergeAdapter(const float* a, const float* b, int64_t r, int64_t in, int64_t w, double scale,
                  float* weight_rows) {
  for (int64_t i = 0; i < w; ++i) {
    float* row = weight_rows + i * in;
    for (int64_t k = 0; k < r; ++k) {
      const float s = static_cast<float>(scale * b[i * r + k]);
      const float* ak = a + k * in;
      for (int64_t j = 0; j < in; ++j) row[j] += s * ak[j];
    }
  }
}

StatusOr<Graph> ApplyLora(const Graph& base, const std::vector<LoraTarget>& targets,
                          const LoraOptions& options) {
  if (options.r <= 0)
    return InvalidArgumentError("LoRA: r must be positive, got " + std::to_string(options.r));
  std::map<int, std::vector<LoraTarget>> by_node;
  for (const LoraTarget& t : targets) by_node[t.node].push_back(t);
  for (const auto& [node, list] : by_node)
    for (const LoraTarget& t : list) DS_RETURN_IF_ERROR(CheckTarget(base, t, list));
  Graph g = base;
  g.nodes.clear();
  if (options.freeze_base)
    for (TensorInfo& t : g.tensors)
      if (t.role == TensorRole::kParam) t.role = TensorRole::kFrozen;
  Rewriter w(&g, options, static_cast<int64_t>(base.nodes.size()));
  for (size_t i = 0; i < base.nodes.size(); ++i) {
    NodeInfo n = base.nodes[i];
    // The base nodes keep the random streams (dropout) they draw in the base graph.
    if (n.seed_id < 0) n.seed_id = static_cast<int64_t>(i);
    auto it = by_node.find(static_cast<int>(i));
    if (it == by_node.end()) {
      g.nodes.push_back(std::move(n));
      continue;
    }
    std::vector<LoraTarget>& list = it->second;
    std::sort(list.begin(), list.end(),
              [](const LoraTarget& a, const LoraTarget& b) { return a.begin < b.begin; });
    const int y = n.outputs[0];
    const int64_t in = base.tensors[n.inputs[1]].shape[1].size;
    const int64_t out = base.tensors[n.inputs[1]].shape[0].size;
    int acc = w.Activation(y, base.tensors[y].name + ".base", out);
    n.outputs[0] = acc;
    g.nodes.push_back(n);
    for (size_t k = 0; k < list.size(); ++k) {
      const bool last = k + 1 == list.size();
      const int next = last ? y : w.Activation(y, list[k].module + ".out", out);
      w.Adapter(base.nodes[i], list[k], in, acc, next);
      acc = next;
    }
  }
  return g;
}

}  // namespace ds
