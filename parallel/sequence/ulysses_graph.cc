#include "parallel/sequence/ulysses_graph.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/head_split.h"
#include "parallel/expert/ep_graph.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {

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

  kernels::Attrs Layout(int inverse) const {
    kernels::Attrs a;
    a.SetInt("sp_degree", sp_);
    a.SetInt("inverse", inverse);
    return a;
  }

  kernels::Attrs Heads(const std::string& heads, int64_t h, int64_t kv, int64_t d,
                       int inverse) const {
    kernels::Attrs a = Layout(inverse);
    a.SetString("heads", heads);
    a.SetInt("n_head", h);
    a.SetInt("n_kv_head", kv);
    a.SetInt("head_dim", d);
    return a;
  }

  // The widest rank's query heads (out) and query plus key and value heads (qkv).
  void PartHeads(int64_t h, int64_t kv, int64_t* qkv, int64_t* out) const {
    *qkv = *out = 0;
    for (int j = 0; j < sp_; ++j) {
      const int64_t q = kernels::QueryHeads(h, kv, sp_, j).size();
      *qkv = std::max(*qkv, q + 2 * kernels::KvHeads(h, kv, sp_, j).size());
      *out = std::max(*out, q);
    }
  }

  // Attention over this rank's heads of the whole sequence (kernels/head_split.h deals them).
  Status Attention(NodeInfo n) {
    const Graph& g = local_->graph;
    const int64_t h = n.attrs.Int("n_head", 0), kv = n.attrs.Int("n_kv_head", h);
    const Status split = kernels::CheckHeadSplit(h, kv, sp_);
    if (!split.ok())
      return InvalidArgumentError("parallel.ulysses " + Str(sp_) + " at \"" + n.name +
                                  "\": " + split.message());
    auto width = g.config.find("n_embd");
    const int64_t d = width == g.config.end() ? 0 : width->second / h;
    const int64_t q = kernels::QueryHeads(h, kv, sp_, rank_).size();
    const int64_t k = kernels::KvHeads(h, kv, sp_, rank_).size();
    int64_t qkv_part = 0, out_part = 0;
    PartHeads(h, kv, &qkv_part, &out_part);
    const std::string qkv = Str(h) + "," + Str(kv) + "," + Str(kv);
    int x =
        Add("ulysses_heads", n.name + ".heads", {n.inputs[0]}, n.block, Heads(qkv, h, kv, d, 0));
    x = Exchange(x, n.block);
    kernels::Attrs whole = Layout(0);
    whole.SetInt("width", (q + 2 * k) * d);
    n.inputs[0] = Add("ulysses_time", n.name + ".whole", {x}, n.block, whole);
    n.attrs.SetInt("n_head", q);
    n.attrs.SetInt("n_kv_head", k);
    const int out = n.outputs[0];
    const int block = n.block;
    const std::string name = n.name;
    local_->graph.nodes.push_back(std::move(n));
    kernels::Attrs chunks = Layout(1);
    chunks.SetInt("part_width", out_part * d);
    int y = Add("ulysses_time", name + ".chunks", {out}, block, chunks);
    y = Exchange(y, block);
    rename_[out] = Add("ulysses_heads", name + ".out", {y}, block, Heads(Str(h), h, kv, d, 1));
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

}  // namespace ds::parallel
