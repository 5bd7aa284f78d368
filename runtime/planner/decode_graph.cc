#include "runtime/planner/decode_graph.h"

#include <algorithm>
#include <map>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"

namespace ds::planner {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// The logits: what the cross-entropy (or PPO's actor loss: the actor generates its rollouts
// from the same weights) reads, the "logits" linear of every family.
int LogitsTensor(const Graph& g) {
  for (const NodeInfo& n : g.nodes)
    if (n.op == "cross_entropy" || n.op == "ppo_actor_loss") return n.inputs[0];
  return -1;
}

class Builder {
 public:
  Builder(const Graph& model, int64_t max_len) : model_(model), max_len_(max_len) {}

  StatusOr<DecodeGraphInfo> Run() {
    const int logits = LogitsTensor(model_);
    if (logits < 0)
      return InvalidArgumentError(
          "generation: model " + model_.name +
          " has no logits (no cross_entropy or ppo_actor_loss node reads any)");
    DS_ASSIGN_OR_RETURN(specs_, InferTensorSpecs(model_, {{"batch", 1}, {"seq", 1}}, model_.name));
    Graph& g = out_.graph;
    g.name = model_.name + ".decode";
    g.family = model_.family;
    g.num_blocks = model_.num_blocks;
    g.config = model_.config;
    // Every parameter first, in the model's order (the ParamStore's slots).
    for (int t : model_.Params()) Keep(t);
    for (const NodeInfo& n : model_.nodes) {
      const bool last = !n.outputs.empty() && n.outputs[0] == logits;
      DS_RETURN_IF_ERROR(Copy(n, last));
      if (last) break;
    }
    out_.logits = Keep(logits);
    g.loss = out_.logits;
    out_.vocab = specs_[logits].shape.back();
    out_.max_len = max_len_;
    g.config["max_seq_len"] = max_len_;
    // The rewrite's shapes hold (the graph's loss is the logits: no ValidateGraph, which
    // wants a scalar).
    DS_RETURN_IF_ERROR(
        InferTensorSpecs(g, {{"batch", 2}, {"seq", std::min<int64_t>(3, max_len_)}}, g.name)
            .status());
    return std::move(out_);
  }

 private:
  // The decode graph's index of model tensor `t`, added on first use.
  int Keep(int t) {
    auto it = index_.find(t);
    if (it != index_.end()) return it->second;
    out_.graph.tensors.push_back(model_.tensors[t]);
    return index_[t] = static_cast<int>(out_.graph.tensors.size()) - 1;
  }
  int State(const std::string& name, SymShape shape, DType dtype) {
    auto it = state_.find(name);
    if (it != state_.end()) return it->second;
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.role = TensorRole::kState;
    out_.graph.tensors.push_back(t);
    return state_[name] = static_cast<int>(out_.graph.tensors.size()) - 1;
  }
  int Positions() { return State(kPositions, {Dim::Sym("batch"), Dim::Sym("seq")}, DType::kI32); }

  Status Copy(NodeInfo n, bool logits) {
    if (n.op == "cross_entropy" || n.op == "moe_loss" || n.op == "ppo_actor_loss")
      return OkStatus();
    const std::string op = n.op;
    // A pad_mask model's left pads, packed documents' starts and positions: generation pads
    // and positions its own batches, one sequence per row.
    n.inputs.erase(std::remove_if(n.inputs.begin(), n.inputs.end(),
                                  [&](int t) {
                                    const std::string& name = model_.tensors[t].name;
                                    return name == kLeftPads || name == kDocStarts ||
                                           name == kDocPositions;
                                  }),
                   n.inputs.end());
    for (int& t : n.inputs) t = Keep(t);
    for (int& t : n.outputs) t = Keep(t);
    if (logits) LastPositionOnly(&n);
    if (op == "attention" || op == "position_embedding" || op == "rope")
      DS_RETURN_IF_ERROR(Rewrite(&n));
    out_.graph.nodes.push_back(std::move(n));
    return OkStatus();
  }

  // The vocabulary projection reads each sequence's last position only (last_position):
  // [batch, 1, vocab] logits, the next token's.
  void LastPositionOnly(NodeInfo* n) {
    Graph& g = out_.graph;
    TensorInfo t;
    t.name = g.tensors[n->inputs[0]].name + ".last";
    t.role = TensorRole::kActivation;
    const SymShape& x = g.tensors[n->inputs[0]].shape;  // [batch, seq, C]
    if (x.size() == 3) t.shape = {x[0], Dim::Fixed(1), x[2]};
    g.tensors.push_back(t);
    const int last = static_cast<int>(g.tensors.size()) - 1;
    NodeInfo k;
    k.name = t.name;
    k.op = "last_position";
    k.inputs = {n->inputs[0]};
    k.outputs = {last};
    k.block = n->block;
    g.nodes.push_back(k);
    n->inputs[0] = last;
    SymShape& logits = g.tensors[n->outputs[0]].shape;  // [batch, 1, vocab]
    if (logits.size() == 3) {
      logits[1] = Dim::Fixed(1);
    } else {
      logits.clear();  // inferred
    }
  }

  Status Rewrite(NodeInfo* n) {
    if (n->op == "position_embedding") {
      const int64_t rows = out_.graph.tensors[n->inputs[1]].shape[0].size;
      if (max_len_ > rows)
        return InvalidArgumentError("generation: max_len " + Str(max_len_) + " exceeds the " +
                                    Str(rows) + " positions of " + model_.name + "'s " +
                                    out_.graph.tensors[n->inputs[1]].name);
      n->inputs.push_back(Positions());
      return OkStatus();
    }
    if (n->op == "rope") {
      n->inputs.push_back(Positions());
      return OkStatus();
    }
    if (n->op != "attention") return OkStatus();
    const int64_t heads = n->attrs.Int("n_head", 0), kv = n->attrs.Int("n_kv_head", heads);
    const int64_t width =
        specs_[model_.FindTensor(out_.graph.tensors[n->inputs[0]].name)].shape.back();
    if (heads <= 0 || kv <= 0 || width % (heads + 2 * kv) != 0)
      return InvalidArgumentError("generation: attention \"" + n->name + "\" of " + model_.name +
                                  " has qkv width " + Str(width) + " for " + Str(heads) +
                                  " heads and " + Str(kv) + " kv heads");
    CacheLayer c{n->name + ".k_cache", n->name + ".v_cache", kv, width / (heads + 2 * kv)};
    const SymShape cache = {Dim::Sym("batch"), Dim::Fixed(kv), Dim::Fixed(max_len_),
                            Dim::Fixed(c.head_dim)};
    n->op = "kv_attention";
    n->inputs = {n->inputs[0], State(c.k, cache, DType::kF32), State(c.v, cache, DType::kF32),
                 State(kStart, {Dim::Fixed(1)}, DType::kI32),
                 State(kPad, {Dim::Sym("batch")}, DType::kI32)};
    out_.layers.push_back(c);
    return OkStatus();
  }

  const Graph& model_;
  const int64_t max_len_;
  std::vector<TensorSpec> specs_;
  DecodeGraphInfo out_;
  std::map<int, int> index_;
  std::map<std::string, int> state_;
};

}  // namespace

int64_t DecodeGraphInfo::cache_bytes_per_sequence() const {
  int64_t bytes = 0;
  for (const CacheLayer& c : layers) bytes += 2 * c.n_kv_head * max_len * c.head_dim * 4;
  return bytes;
}

StatusOr<DecodeGraphInfo> DecodeGraph(const Graph& model, int64_t max_len) {
  if (max_len < 1) return InvalidArgumentError("generation: max_len must be >= 1");
  return Builder(model, max_len).Run();
}

}  // namespace ds::planner
