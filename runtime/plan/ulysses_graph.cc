#include "runtime/plan/ulysses_graph.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/plan/ep_graph.h"

namespace ds::plan {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

class Rewriter {
 public:
  Rewriter(int sp, int rank, TpLocalGraph* local) : sp_(sp), rank_(rank), local_(local) {}

  Status Run() {
    Graph& g = local_->graph;
    std::vector<NodeInfo> nodes = std::move(g.nodes);
    g.nodes.clear();
    for (size_t t = 0; t < g.tensors.size(); ++t)
      if (g.tensors[t].role == TensorRole::kInput || g.tensors[t].role == TensorRole::kTarget)
        rename_[static_cast<int>(t)] = Chunk(static_cast<int>(t));
    std::vector<int> new_index(nodes.size() + 1, 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      NodeInfo n = std::move(nodes[i]);
      if (n.seed_id < 0) n.seed_id = static_cast<int64_t>(i);
      for (int& t : n.inputs)
        if (rename_.count(t)) t = rename_.at(t);
      new_index[i] = static_cast<int>(g.nodes.size());
      if (n.op == "position_embedding" || n.op == "rope") n.attrs.SetInt("position_chunk", rank_);
      if (n.op == "attention") {
        DS_RETURN_IF_ERROR(Attention(std::move(n)));
      } else if (n.op == "cross_entropy") {
        Loss(std::move(n));
      } else {
        g.nodes.push_back(std::move(n));
      }
    }
    new_index[nodes.size()] = static_cast<int>(g.nodes.size());
    for (TpCollective& c : local_->collectives) c.boundary = new_index.at(c.boundary);
    local_->collectives.insert(local_->collectives.end(), added_.begin(), added_.end());
    for (TensorInfo& t : g.tensors)  // chunks of the sequence: every shape from inference
      if (t.role == TensorRole::kActivation) t.shape.clear();
    local_->replicated.assign(g.tensors.size(), false);
    return OkStatus();
  }

 private:
  int NewTensor(const std::string& name, DType dtype = DType::kF32) {
    TensorInfo t;
    t.name = name;
    t.dtype = dtype;
    t.role = TensorRole::kActivation;
    local_->graph.tensors.push_back(t);
    return static_cast<int>(local_->graph.tensors.size()) - 1;
  }

  // Appends node `op` on `in` writing a new tensor `name`; returns it.
  int Add(const std::string& op, const std::string& name, std::vector<int> in, int block,
          kernels::Attrs attrs, DType dtype = DType::kF32) {
    NodeInfo n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {NewTensor(name, dtype)};
    n.attrs = std::move(attrs);
    n.block = block;
    n.seed_id = -2;  // draws nothing
    local_->graph.nodes.push_back(n);
    return n.outputs[0];
  }

  int Chunk(int t) {
    kernels::Attrs a;
    a.SetInt("sp_rank", rank_);
    a.SetInt("sp_degree", sp_);
    const TensorInfo& info = local_->graph.tensors[t];
    return Add("seq_chunk", info.name + ".sp", {t}, -1, a, info.dtype);
  }

  // A seq_all_to_all node on `parts` and its collectives (forward: the values; backward: the
  // gradients back).
  int Exchange(int parts, int block) {
    const int at = static_cast<int>(local_->graph.nodes.size());
    const int out =
        Add("seq_all_to_all", local_->graph.tensors[parts].name + ".a2a", {parts}, block, {});
    AddAllToAllCuts(at, parts, out, "sp", -1, &added_);
    return out;
  }

  kernels::Attrs Layout(const std::string& heads, int64_t head_dim, int inverse) const {
    kernels::Attrs a;
    a.SetInt("sp_degree", sp_);
    a.SetInt("inverse", inverse);
    if (!heads.empty()) {
      a.SetString("heads", heads);
      a.SetInt("head_dim", head_dim);
    }
    return a;
  }

  Status Attention(NodeInfo n) {
    const Graph& g = local_->graph;
    const int64_t h = n.attrs.Int("n_head", 0), kv = n.attrs.Int("n_kv_head", h);
    if (h % sp_ != 0 || kv % sp_ != 0)
      return InvalidArgumentError("parallel.ulysses " + Str(sp_) + " does not divide the " +
                                  Str(h) + " attention heads and " + Str(kv) +
                                  " key/value heads of \"" + n.name +
                                  "\" (each rank attends over n_head / sp heads)");
    auto width = g.config.find("n_embd");
    const int64_t d = width == g.config.end() ? 0 : width->second / h;
    const std::string qkv = Str(h) + "," + Str(kv) + "," + Str(kv);
    int x = Add("ulysses_heads", n.name + ".heads", {n.inputs[0]}, n.block, Layout(qkv, d, 0));
    x = Exchange(x, n.block);
    n.inputs[0] = Add("ulysses_time", n.name + ".whole", {x}, n.block, Layout("", 0, 0));
    n.attrs.SetInt("n_head", h / sp_);
    n.attrs.SetInt("n_kv_head", kv / sp_);
    const int out = n.outputs[0];
    const int block = n.block;
    const std::string name = n.name;
    local_->graph.nodes.push_back(std::move(n));
    int y = Add("ulysses_time", name + ".chunks", {out}, block, Layout("", 0, 1));
    y = Exchange(y, block);
    rename_[out] = Add("ulysses_heads", name + ".out", {y}, block, Layout(Str(h), d, 1));
    return OkStatus();
  }

  // cross_entropy -> seq_ce_stats, their sum over sp, seq_ce_loss (writing the same loss).
  void Loss(NodeInfo n) {
    kernels::Attrs a;
    if (n.attrs.Has("ignore_index")) a.SetInt("ignore_index", n.attrs.Int("ignore_index", -100));
    const int stats =
        Add("seq_ce_stats", n.name + ".stats", {n.inputs[0], n.inputs[1]}, n.block, a);
    TpCollective sum;
    sum.kind = TpCollective::kAllReduce;
    sum.group = "sp";
    sum.boundary = static_cast<int>(local_->graph.nodes.size());
    sum.tensor = stats;
    added_.push_back(sum);
    n.op = "seq_ce_loss";
    n.inputs.push_back(stats);
    n.attrs = a;
    local_->graph.nodes.push_back(std::move(n));
  }

  const int sp_, rank_;
  TpLocalGraph* local_;
  std::map<int, int> rename_;
  std::vector<TpCollective> added_;
};

}  // namespace

Status ApplyUlysses(int sp, int rank, TpLocalGraph* local) {
  if (sp <= 1) return OkStatus();
  if (NumExperts(local->graph) > 0)
    return UnimplementedError("parallel.ulysses " + Str(sp) +
                              " with a mixture-of-experts model is not planned yet");
  return Rewriter(sp, rank, local).Run();
}

}  // namespace ds::plan
