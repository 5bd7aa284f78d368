#include "parallel/expert/ep_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "parallel/expert/moe_overlap.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

class Rewriter {
 public:
  Rewriter(int ep, int rank, int tp, int tp_rank, TpLocalGraph* local)
      : ep_(ep), rank_(rank), tp_(tp), tp_rank_(tp_rank), local_(local) {}

  Status Run() {
    Graph& g = local_->graph;
    DS_RETURN_IF_ERROR(SliceExperts());
    std::vector<NodeInfo> nodes = std::move(g.nodes);
    g.nodes.clear();
    if (tp_ > 1) DS_RETURN_IF_ERROR(FindTokenPaths(nodes));
    local_->aux_per_rank = tp_ > 1;
    new_index_.assign(nodes.size() + 1, 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      NodeInfo n = std::move(nodes[i]);
      if (n.seed_id < 0) n.seed_id = static_cast<int64_t>(i);
      for (int& t : n.inputs)
        if (rename_.count(t)) t = rename_.at(t);
      if (path_.count(static_cast<int>(i))) OnChunk(&n);
      if (n.op == "moe_combine") n.inputs[0] = Exchange(n.inputs[0], n.inputs[3], n);
      if (n.op == "expert_linear") DS_RETURN_IF_ERROR(SplitExperts(&n));
      if (n.op == "moe_loss" && tp_ > 1) {  // each tp rank's aux loss is its chunk's: the mean
        n.attrs.SetFloat("coeff", n.attrs.Float("coeff", 0.0) / tp_);
        n.attrs.SetFloat("metric_scale", static_cast<float>(tp_));
      }
      const int whole = n.op == "moe_combine" && tp_ > 1 ? n.outputs[0] : -1;
      if (whole >= 0) n.outputs[0] = NewActivation(g.tensors[whole].name + ".chunk");
      new_index_[i] = static_cast<int>(g.nodes.size());
      g.nodes.push_back(n);
      if (n.op == "moe_router" && n.attrs.Int("drop_tokens", 1) == 0) AgreeCapacity(n);
      if (n.op == "moe_dispatch") rename_[n.outputs[0]] = Exchange(n.outputs[0], n.inputs[2], n);
      if (whole >= 0) GatherTokens(n.outputs[0], whole, n.block);
    }
    new_index_[nodes.size()] = static_cast<int>(g.nodes.size());
    for (TpCollective& c : local_->collectives) c.boundary = new_index_.at(c.boundary);
    collectives_.insert(collectives_.begin(), local_->collectives.begin(),
                        local_->collectives.end());  // the tensor-parallel ones, moved above
    // Forward cuts in node order, then backward ones (ForwardWhole walks the forward ones).
    std::stable_sort(collectives_.begin(), collectives_.end(),
                     [](const TpCollective& a, const TpCollective& b) {
                       if (a.backward != b.backward) return !a.backward;
                       return a.backward ? a.boundary > b.boundary : a.boundary < b.boundary;
                     });
    local_->collectives = std::move(collectives_);
    local_->replicated.resize(g.tensors.size(), false);
    OverlapSharedExperts(local_);
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

  // Tensor parallelism (DeepSpeed's drop of duplicate tokens): the tp ranks hold the same tokens,
  // so each routes only its 1 / tp of them (its chunk of the flattened batch x seq). The nodes from
  // each MoE layer's gate linear to its combine run on the chunk; the gate and the experts'
  // gradients are then each rank's part of the sum, all-reduced over tp (sp_params).
  Status FindTokenPaths(const std::vector<NodeInfo>& nodes) {
    std::map<int, int> producer;
    for (size_t i = 0; i < nodes.size(); ++i)
      for (int t : nodes[i].outputs) producer[t] = static_cast<int>(i);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].op != "moe_router") continue;
      const int gate = producer.at(nodes[i].inputs[0]);
      size_t end = i;
      while (end < nodes.size() && nodes[end].op != "moe_combine") ++end;
      if (end == nodes.size())
        return InvalidArgumentError("expert parallelism: router \"" + nodes[i].name +
                                    "\" has no moe_combine after it");
      for (size_t k = gate; k <= end; ++k) path_.insert(static_cast<int>(k));
      chunked_inputs_.insert(nodes[gate].inputs[0]);  // the layer's tokens (the norm's output)
    }
    return OkStatus();
  }

  // A node of a layer's token path: its whole-token input becomes this rank's chunk (one
  // sp_split per tensor; backward all-reduces the whole gradient its chunks fill in), its
  // outputs are chunk-shaped (inferred), its parameters' gradients partial sums.
  void OnChunk(NodeInfo* n) {
    Graph& g = local_->graph;
    for (int& t : n->inputs) {
      if (g.tensors[t].role == TensorRole::kParam &&
          std::find(local_->sp_params.begin(), local_->sp_params.end(), t) ==
              local_->sp_params.end())
        local_->sp_params.push_back(t);
      if (!chunked_inputs_.count(t)) continue;
      if (!chunk_of_.count(t)) {
        const int c = NewActivation(g.tensors[t].name + ".chunk");
        NodeInfo k;
        k.name = g.tensors[t].name + ".moe_split";
        k.op = "sp_split";
        k.inputs = {t};
        k.outputs = {c};
        k.attrs = TokenAttrs();
        k.block = n->block;
        k.seed_id = -2;
        const int at = static_cast<int>(g.nodes.size());
        g.nodes.push_back(k);
        collectives_.push_back({TpCollective::kAllReduce, at, true, t, -1, false});
        chunk_of_[t] = c;
      }
      t = chunk_of_.at(t);
    }
    for (int t : n->outputs) g.tensors[t].shape.clear();
  }

  // After the combine: every rank's chunk of the layer's output all-gathered over tp into
  // `whole`. Its gradient is the same on every tp rank, so backward only takes the rank's rows
  // (sp_gather's grad_chunk) and communicates nothing.
  void GatherTokens(int chunk, int whole, int block) {
    Graph& g = local_->graph;
    NodeInfo k;
    k.name = g.tensors[whole].name + ".moe_gather";
    k.op = "sp_gather";
    k.inputs = {chunk, Ids()};
    k.outputs = {whole};
    k.attrs = TokenAttrs();
    k.attrs.SetInt("grad_chunk", 1);
    k.block = block;
    k.seed_id = -2;
    const int at = static_cast<int>(g.nodes.size());
    g.nodes.push_back(k);
    collectives_.push_back({TpCollective::kAllGather, at + 1, false, chunk, whole, false});
  }

  kernels::Attrs TokenAttrs() const {
    kernels::Attrs a;
    a.SetInt("sp_rank", tp_rank_);
    a.SetInt("sp_degree", tp_);
    return a;
  }

  int Ids() const {
    const Graph& g = local_->graph;
    for (size_t t = 0; t < g.tensors.size(); ++t)
      if (g.tensors[t].role == TensorRole::kInput) return static_cast<int>(t);
    return -1;
  }

  int NewActivation(const std::string& name) {
    TensorInfo t;
    t.name = name;
    t.role = TensorRole::kActivation;
    local_->graph.tensors.push_back(t);
    return static_cast<int>(local_->graph.tensors.size()) - 1;
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

  const int ep_, rank_, tp_, tp_rank_;
  TpLocalGraph* local_;
  std::set<int> path_;            // nodes (old index) of the layers' token paths (tp > 1)
  std::set<int> chunked_inputs_;  // the layers' whole-token inputs
  std::map<int, int> chunk_of_;   // whole-token input -> this rank's chunk
  std::map<int, int> rename_;     // dispatched buffer -> its exchanged copy
  std::vector<int> new_index_;    // old node index -> new
  std::vector<TpCollective> collectives_;
};

}  // namespace

int64_t NumExperts(const Graph& graph) {
  auto it = graph.config.find("num_experts");
  return it == graph.config.end() ? 0 : it->second;
}

Status ApplyExpertParallel(int ep, int rank, TpLocalGraph* local, int tp, int tp_rank) {
  if (ep <= 1) return OkStatus();
  const int64_t experts = NumExperts(local->graph);
  if (experts == 0)
    return InvalidArgumentError("parallel.expert " + Str(ep) +
                                " needs a mixture-of-experts model (" + local->graph.name +
                                " has no expert layer: model.moe.num_experts)");
  if (experts % ep != 0)
    return InvalidArgumentError("parallel.expert " + Str(ep) + " does not divide num_experts " +
                                Str(experts));
  return Rewriter(ep, rank, tp, tp_rank, local).Run();
}

StatusOr<std::vector<TpParamShard>> ExpertParallelShards(const Graph& whole, int ep, int rank,
                                                         int tp, int tp_rank) {
  DS_ASSIGN_OR_RETURN(TpLocalGraph local, TensorParallelGraph(whole, tp, tp_rank));
  DS_RETURN_IF_ERROR(ApplyExpertParallel(ep, rank, &local, tp, tp_rank));
  return std::move(local.shards);
}

}  // namespace ds::parallel
