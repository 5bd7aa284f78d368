#include "runtime/plan/ep_graph.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::plan {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

class Rewriter {
 public:
  Rewriter(int ep, int rank, TpLocalGraph* local) : ep_(ep), rank_(rank), local_(local) {}

  Status Run() {
    Graph& g = local_->graph;
    DS_RETURN_IF_ERROR(SliceExperts());
    std::vector<NodeInfo> nodes = std::move(g.nodes);
    g.nodes.clear();
    new_index_.assign(nodes.size() + 1, 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      NodeInfo n = std::move(nodes[i]);
      if (n.seed_id < 0) n.seed_id = static_cast<int64_t>(i);
      for (int& t : n.inputs)
        if (rename_.count(t)) t = rename_.at(t);
      if (n.op == "moe_combine") n.inputs[0] = Exchange(n.inputs[0], n.inputs[3], n);
      if (n.op == "expert_linear") DS_RETURN_IF_ERROR(SplitExperts(&n));
      new_index_[i] = static_cast<int>(g.nodes.size());
      g.nodes.push_back(n);
      if (n.op == "moe_router" && n.attrs.Int("drop_tokens", 1) == 0) AgreeCapacity(n);
      if (n.op == "moe_dispatch") rename_[n.outputs[0]] = Exchange(n.outputs[0], n.inputs[2], n);
    }
    new_index_[nodes.size()] = static_cast<int>(g.nodes.size());
    for (TpCollective& c : local_->collectives) c.boundary = new_index_.at(c.boundary);
    collectives_.insert(collectives_.begin(), local_->collectives.begin(),
                        local_->collectives.end());  // the tensor-parallel ones, moved above
    local_->collectives = std::move(collectives_);
    local_->replicated.resize(g.tensors.size(), false);
    return OkStatus();
  }

 private:
  // Appends a moe_all_to_all node on `buffer` (block of `like`) and its two collectives; returns
  // the exchanged tensor.
  int Exchange(int buffer, int capacity, const NodeInfo& like) {
    Graph& g = local_->graph;
    TensorInfo t;
    t.name = g.tensors[buffer].name + ".ep";
    t.role = TensorRole::kActivation;
    g.tensors.push_back(t);
    const int out = static_cast<int>(g.tensors.size()) - 1;
    NodeInfo n;
    n.name = t.name;
    n.op = "moe_all_to_all";
    n.inputs = {buffer, capacity};
    n.outputs = {out};
    n.block = like.block;
    n.seed_id = -2;  // draws nothing
    const int at = static_cast<int>(g.nodes.size());
    g.nodes.push_back(n);
    AddAllToAllCuts(at, buffer, out, "ep", capacity, &collectives_);
    return out;
  }

  // Without drops the ranks agree on the capacity (the max of their busiest experts) before any
  // all-to-all: DeepSpeed jobs hang when they do not (its issue #6809).
  void AgreeCapacity(const NodeInfo& router) {
    TpCollective c;
    c.kind = TpCollective::kAllReduce;
    c.group = "ep";
    c.max = true;
    c.boundary = static_cast<int>(local_->graph.nodes.size());
    c.tensor = router.outputs[3];
    collectives_.push_back(c);
  }

  // Every stacked expert parameter [E, ...] becomes this rank's [E / ep, ...]: experts
  // [rank x E / ep, (rank + 1) x E / ep) of the whole tensor (a box along dimension 0).
  Status SliceExperts() {
    Graph& g = local_->graph;
    const std::vector<int> params = g.Params();
    for (size_t i = 0; i < params.size(); ++i) {
      TensorInfo& t = g.tensors[params[i]];
      if (t.sharding != ShardKind::kExpert) continue;
      const int64_t experts = t.shape.empty() ? 0 : t.shape[0].size;
      if (experts % ep_ != 0)
        return InvalidArgumentError("expert parallelism: parallel.expert " + Str(ep_) +
                                    " does not divide the " + Str(experts) + " experts of \"" +
                                    t.name + "\"");
      t.shape[0].size = experts / ep_;
      TpParamShard& sh = local_->shards.at(i);
      sh.local_shape[0] = experts / ep_;
      sh.replicated = false;
      TpBox box;
      box.offset.assign(sh.full_shape.size(), 0);
      box.offset[0] = rank_ * (experts / ep_);
      box.shape = sh.local_shape;
      sh.boxes = {box};
    }
    return OkStatus();
  }

  // The node computes every expert its (sliced) weights hold.
  Status SplitExperts(NodeInfo* n) {
    const TensorInfo& w = local_->graph.tensors[n->inputs[2]];
    n->attrs.SetInt("expert_begin", 0);
    n->attrs.SetInt("local_experts", w.shape.empty() ? 0 : w.shape[0].size);
    return OkStatus();
  }

  const int ep_, rank_;
  TpLocalGraph* local_;
  std::map<int, int> rename_;   // dispatched buffer -> its exchanged copy
  std::vector<int> new_index_;  // old node index -> new
  std::vector<TpCollective> collectives_;
};

}  // namespace

int64_t NumExperts(const Graph& graph) {
  auto it = graph.config.find("num_experts");
  return it == graph.config.end() ? 0 : it->second;
}

Status ApplyExpertParallel(int ep, int rank, TpLocalGraph* local) {
  if (ep <= 1) return OkStatus();
  const int64_t experts = NumExperts(local->graph);
  if (experts == 0)
    return InvalidArgumentError("parallel.expert " + Str(ep) +
                                " needs a mixture-of-experts model (" + local->graph.name +
                                " has no expert layer: model.moe.num_experts)");
  if (experts % ep != 0)
    return InvalidArgumentError("parallel.expert " + Str(ep) + " does not divide num_experts " +
                                Str(experts));
  return Rewriter(ep, rank, local).Run();
}

StatusOr<std::vector<TpParamShard>> ExpertParallelShards(const Graph& whole, int ep, int rank) {
  DS_ASSIGN_OR_RETURN(TpLocalGraph local, TensorParallelGraph(whole, 1, 0));
  DS_RETURN_IF_ERROR(ApplyExpertParallel(ep, rank, &local));
  return std::move(local.shards);
}

}  // namespace ds::plan
