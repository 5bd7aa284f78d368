#include "parallel/tensor/tp_graph.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/registry.h"
#include "runtime/base/status_macros.h"

namespace ds::parallel {
namespace {

using kernels::TpRule;

// kSplit: split by features (heads, columns, vocabulary); kSeq: a chunk of the tokens
// (sequence parallelism), shape left to inference.
enum class State { kReplicated, kSplit, kSeq };

std::string Str(int64_t v) { return std::to_string(v); }

class Partitioner {
 public:
  Partitioner(const Graph& full, int tp, int rank, bool sp, std::vector<TpParamShard> shards)
      : full_(full), tp_(tp), rank_(rank), sp_(sp) {
    out_.shards = std::move(shards);
    out_.graph = full;
    out_.graph.nodes.clear();
    const std::vector<int> params = full.Params();
    for (size_t i = 0; i < params.size(); ++i) {
      shard_of_[params[i]] = &out_.shards[i];
      SymShape& shape = out_.graph.tensors[params[i]].shape;
      for (size_t d = 0; d < shape.size(); ++d)
        shape[d] = Dim::Fixed(out_.shards[i].local_shape[d]);
    }
    state_.assign(full.tensors.size(), State::kReplicated);
    for (size_t t = 0; t < full.tensors.size(); ++t)
      if (full.tensors[t].role == TensorRole::kInput) ids_ = static_cast<int>(t);
  }

  StatusOr<TpLocalGraph> Run() {
    for (size_t i = 0; i < full_.nodes.size(); ++i) {
      const NodeInfo& n = full_.nodes[i];
      const kernels::OpDef* def = kernels::FindOp(n.op);
      if (!def) return Bad(n, "unknown op");
      NodeInfo local = n;
      local.seed_id = static_cast<int64_t>(i);
      if (InSeqRegion(local) &&
          (def->tp_rule == TpRule::kReplicated || def->tp_rule == TpRule::kElementwise))
        ToChunks(&local);
      DS_RETURN_IF_ERROR(Partition(def->tp_rule, std::move(local)));
    }
    DS_RETURN_IF_ERROR(AddInputGradientReductions());
    // Forward ones in node order, then backward ones in backward (descending) order.
    std::stable_sort(out_.collectives.begin(), out_.collectives.end(),
                     [](const TpCollective& a, const TpCollective& b) {
                       if (a.backward != b.backward) return !a.backward;
                       return a.backward ? a.boundary > b.boundary : a.boundary < b.boundary;
                     });
    out_.sp_params.assign(sp_params_.begin(), sp_params_.end());
    out_.replicated.assign(state_.size(), false);
    for (size_t t = 0; t < state_.size(); ++t)
      out_.replicated[t] = IsActivation(static_cast<int>(t)) && state_[t] == State::kReplicated;
    return std::move(out_);
  }

 private:
  Status Bad(const NodeInfo& n, const std::string& what) const {
    return InvalidArgumentError("tensor parallelism (parallel.tensor " + Str(tp_) + "): node \"" +
                                n.name + "\" (" + n.op + ") " + what);
  }
  Graph& g() { return out_.graph; }
  bool IsActivation(int t) const { return out_.graph.tensors[t].role == TensorRole::kActivation; }
  const std::string& Name(int t) const { return out_.graph.tensors[t].name; }
  int64_t Width(int t) const { return out_.graph.tensors[t].shape.back().size; }
  void SetWidth(int t, int64_t w) { g().tensors[t].shape.back() = Dim::Fixed(w); }
  int Emit(NodeInfo n) {
    g().nodes.push_back(std::move(n));
    return static_cast<int>(g().nodes.size()) - 1;
  }
  // A new activation like `like`, named `name`, of `shape`.
  int NewTensor(int like, const std::string& name, SymShape shape) {
    TensorInfo t = g().tensors[like];
    t.name = name;
    t.shape = std::move(shape);
    t.role = TensorRole::kActivation;
    t.dtype = DType::kF32;
    g().tensors.push_back(std::move(t));
    state_.push_back(State::kReplicated);
    return static_cast<int>(g().tensors.size()) - 1;
  }
  // The forward all-reduce of what the last emitted node wrote.
  void ReduceLast(int tensor, bool max) {
    out_.collectives.push_back(
        {TpCollective::kAllReduce, static_cast<int>(g().nodes.size()), false, tensor, -1, max});
    state_[tensor] = State::kReplicated;
  }

  // Sequence parallelism: the transformer blocks and the final norm (the embeddings run whole).
  bool InSeqRegion(const NodeInfo& n) const { return sp_ && n.block >= 0; }
  kernels::Attrs SpAttrs() const {
    kernels::Attrs a;
    a.SetInt("sp_rank", rank_);
    a.SetInt("sp_degree", tp_);
    return a;
  }
  // A node of `op` over `in`, writing a new chunk-shaped (inferred) or given tensor.
  int EmitSp(const char* op, const std::string& name, std::vector<int> in, int out, int block) {
    NodeInfo k;
    k.name = name;
    k.op = op;
    k.inputs = std::move(in);
    k.outputs = {out};
    k.attrs = SpAttrs();
    k.block = block;
    return Emit(std::move(k));
  }
  // Norms, dropout and residuals run on token chunks: whole inputs are replaced by their
  // chunk (sp_split, once per tensor; backward all-reduces the whole gradient it fills in).
  void ToChunks(NodeInfo* n) {
    for (int& t : n->inputs) {
      if (!IsActivation(t) || state_[t] != State::kReplicated) continue;
      if (!chunk_of_.count(t)) {
        const int c = NewTensor(t, g().tensors[t].name + ".chunk", {});
        state_[c] = State::kSeq;
        const int node = EmitSp("sp_split", g().tensors[t].name + ".sp_split", {t}, c, n->block);
        out_.collectives.push_back({TpCollective::kAllReduce, node, true, t, -1, false});
        chunk_of_[t] = c;
      }
      t = chunk_of_.at(t);
    }
    for (int t : n->inputs)
      if (g().tensors[t].role == TensorRole::kParam) sp_params_.insert(t);
  }
  // The whole tokens of chunk tensor `t` for a column-parallel linear (sp_gather, once).
  int Gathered(int t, int block) {
    if (gathered_.count(t)) return gathered_.at(t);
    const int w = NewTensor(t, g().tensors[t].name + ".gathered", {});
    const int node = EmitSp("sp_gather", g().tensors[t].name + ".sp_gather", {t, ids_}, w, block);
    out_.collectives.push_back({TpCollective::kAllGather, node + 1, false, t, w, false});
    out_.collectives.push_back({TpCollective::kReduceScatter, node, true, w, t, false});
    gathered_[t] = w;
    return w;
  }
  Status NeedReplicated(const NodeInfo& n) const {
    for (int t : n.inputs)
      if (IsActivation(t) && state_[t] != State::kReplicated)
        return Bad(n,
                   "needs its input \"" + Name(t) + "\" whole, and it is split over the tp ranks");
    return OkStatus();
  }
  ShardKind WeightKind(const NodeInfo& n) const {
    return n.inputs.size() > 1 ? full_.tensors[n.inputs[1]].sharding : ShardKind::kNone;
  }

  Status Partition(TpRule rule, NodeInfo n) {
    switch (rule) {
      case TpRule::kReplicated:
        return Replicated(std::move(n));
      case TpRule::kElementwise:
        return Elementwise(std::move(n));
      case TpRule::kLinear:
        return Linear(std::move(n));
      case TpRule::kHeads:
        return Heads(std::move(n));
      case TpRule::kEmbedding:
        return Embedding(std::move(n));
      case TpRule::kCrossEntropy:
        return CrossEntropy(std::move(n));
      case TpRule::kNone:
        break;
    }
    return Bad(n, "has no tensor-parallel rule (kernels::TpRule)");
  }

  // Whole inputs; with sequence parallelism, all on token chunks (ToChunks made them so).
  Status Replicated(NodeInfo n) {
    bool chunks = false;
    for (int t : n.inputs) chunks = chunks || (IsActivation(t) && state_[t] == State::kSeq);
    if (!chunks) DS_RETURN_IF_ERROR(NeedReplicated(n));
    for (int t : n.outputs) {
      state_[t] = chunks ? State::kSeq : State::kReplicated;
      if (chunks) g().tensors[t].shape.clear();
    }
    Emit(std::move(n));
    return OkStatus();
  }

  Status Elementwise(NodeInfo n) {
    int first = -1;
    for (int t : n.inputs) {
      if (!IsActivation(t)) continue;
      if (first >= 0 && state_[t] != state_[first])
        return Bad(n, "mixes the split \"" + Name(t) + "\" and the whole \"" + Name(first) + "\"");
      if (first < 0) first = t;
    }
    const int out = n.outputs[0];
    if (first >= 0) {
      state_[out] = state_[first];
      g().tensors[out].shape = g().tensors[first].shape;  // chunks: inferred
      // Megatron's model-parallel RNG: a split or token-chunk region's dropout differs per rank.
      if (state_[out] != State::kReplicated) n.seed_id += static_cast<int64_t>(rank_ + 1) << 32;
    }
    Emit(std::move(n));
    return OkStatus();
  }

  Status Linear(NodeInfo n) {
    const int x = n.inputs[0], out = n.outputs[0];
    const ShardKind kind = WeightKind(n);
    const int64_t rows = shard_of_.at(n.inputs[1])->local_shape[0];
    if (kind == ShardKind::kColumn || kind == ShardKind::kVocab) {
      if (state_[x] == State::kSeq) {
        n.inputs[0] = Gathered(x, n.block);  // its gradient is reduce-scattered, not f's
      } else {
        DS_RETURN_IF_ERROR(NeedReplicated(n));
        column_consumers_[x].push_back(static_cast<int>(g().nodes.size()));
      }
      SetWidth(out, rows);
      state_[out] = State::kSplit;
      if (kind == ShardKind::kVocab)
        vocab_start_[out] = shard_of_.at(n.inputs[1])->boxes.front().offset[0];
      Emit(std::move(n));
      return OkStatus();
    }
    if (kind == ShardKind::kRow && InSeqRegion(n)) return RowToChunks(std::move(n));
    if (kind != ShardKind::kRow) {
      DS_RETURN_IF_ERROR(NeedReplicated(n));
      Emit(std::move(n));
      return OkStatus();
    }
    if (state_[x] != State::kSplit)
      return Bad(n, "is row-parallel and its input \"" + Name(x) +
                        "\" is not split (it needs a column-parallel producer)");
    if (n.inputs.size() < 3) {  // partial sums, all-reduced in place
      Emit(std::move(n));
      ReduceLast(out, false);
      return OkStatus();
    }
    const int bias = n.inputs[2];
    const int partial =
        NewTensor(out, full_.tensors[out].name + ".partial", g().tensors[out].shape);
    NodeInfo add;
    add.name = n.name + ".bias";
    add.op = "bias_add";
    add.inputs = {partial, bias};
    add.outputs = {out};
    add.block = n.block;
    add.seed_id = n.seed_id;
    n.inputs.pop_back();
    n.outputs = {partial};
    Emit(std::move(n));
    ReduceLast(partial, false);
    Emit(std::move(add));
    state_[out] = State::kReplicated;
    return OkStatus();
  }

  // Sequence parallelism: a row-parallel linear's partial sums reduce-scattered into token
  // chunks (sp_scatter; backward all-gathers the chunk's gradient), its bias added per chunk.
  Status RowToChunks(NodeInfo n) {
    const int x = n.inputs[0], out = n.outputs[0];
    if (state_[x] != State::kSplit)
      return Bad(n, "is row-parallel and its input \"" + Name(x) +
                        "\" is not split (it needs a column-parallel producer)");
    const bool bias = n.inputs.size() == 3;
    const int partial =
        NewTensor(out, full_.tensors[out].name + ".partial", g().tensors[out].shape);
    const int chunk = bias ? NewTensor(out, full_.tensors[out].name + ".chunk", {}) : out;
    const int b = bias ? n.inputs[2] : -1, block = n.block;
    const std::string name = n.name;
    if (bias) n.inputs.pop_back();
    n.outputs = {partial};
    Emit(std::move(n));
    const int node = EmitSp("sp_scatter", name + ".sp_scatter", {partial}, chunk, block);
    out_.collectives.push_back(
        {TpCollective::kReduceScatter, node + 1, false, partial, chunk, false});
    out_.collectives.push_back({TpCollective::kAllGather, node, true, chunk, partial, false});
    state_[chunk] = State::kSeq;
    g().tensors[chunk].shape.clear();
    if (bias) {
      NodeInfo add;
      add.name = name + ".bias";
      add.op = "bias_add";
      add.inputs = {chunk, b};
      add.outputs = {out};
      add.block = block;
      Emit(std::move(add));
      sp_params_.insert(b);
      state_[out] = State::kSeq;
      g().tensors[out].shape.clear();
    }
    return OkStatus();
  }

  Status Heads(NodeInfo n) {
    const int x = n.inputs[0], out = n.outputs[0];
    if (state_[x] != State::kSplit)
      return Bad(
          n, "runs on the tp rank's heads and its input \"" + Name(x) + "\" is not split by heads");
    const int64_t h = n.attrs.Int("n_head", 0), kv = n.attrs.Int("n_kv_head", h);
    if (h % tp_ != 0)
      return Bad(n, "has n_head " + Str(h) + ", which parallel.tensor " + Str(tp_) +
                        " does not divide (model.n_head)");
    if (kv % tp_ != 0 && tp_ % kv != 0)
      return Bad(n, "has n_kv_head " + Str(kv) + " and parallel.tensor " + Str(tp_) +
                        ": one must divide the other (model.n_kv_head)");
    n.attrs.SetInt("n_head", h / tp_);
    n.attrs.SetInt("n_kv_head", kv >= tp_ ? kv / tp_ : 1);  // replicated: one per rank
    if (kv < tp_) out_.kv_share = tp_ / static_cast<int>(kv);
    const bool heads_out = n.op == "attention" || n.op == "kv_attention";
    SetWidth(out, heads_out ? Width(out) / tp_ : Width(x));
    // Qwen 3's q / k norms: weights every rank applies to its own heads, so each rank's gradient
    // is its heads' part of the sum, all-reduced over tp as sequence parallelism's norms are.
    for (size_t i = 1; n.op == "head_rmsnorm" && i < n.inputs.size(); ++i)
      if (g().tensors[n.inputs[i]].role == TensorRole::kParam) sp_params_.insert(n.inputs[i]);
    if (n.op == "kv_attention")  // generation's KV caches [batch, kv heads, slots, head_dim]
      for (int c : {n.inputs[1], n.inputs[2]})
        g().tensors[c].shape[1] = Dim::Fixed(kv >= tp_ ? kv / tp_ : 1);
    state_[out] = State::kSplit;
    Emit(std::move(n));
    return OkStatus();
  }

  Status Embedding(NodeInfo n) {
    const int out = n.outputs[0];
    if (WeightKind(n) != ShardKind::kVocab) {
      Emit(std::move(n));
      return OkStatus();
    }
    const TpParamShard& w = *shard_of_.at(n.inputs[1]);
    n.attrs.SetInt("vocab_start", w.boxes.front().offset[0]);
    n.attrs.SetInt("vocab_size", w.full_shape[0]);
    Emit(std::move(n));
    ReduceLast(out, false);
    return OkStatus();
  }

  Status CrossEntropy(NodeInfo n) {
    const int logits = n.inputs[0], targets = n.inputs[1], loss = n.outputs[0];
    if (state_[logits] != State::kSplit) {
      Emit(std::move(n));
      return OkStatus();
    }
    if (!vocab_start_.count(logits))
      return Bad(n, "reads logits \"" + Name(logits) +
                        "\" split by something other than a vocab-parallel head");
    kernels::Attrs a = n.attrs;
    a.SetInt("vocab_start", vocab_start_.at(logits));
    a.SetInt("vocab_size", full_.tensors[logits].shape.back().size);
    const SymShape rows = g().tensors[targets].shape;
    SymShape pair = rows;
    pair.push_back(Dim::Fixed(2));
    const int m = NewTensor(logits, full_.tensors[loss].name + ".max", rows);
    const int s = NewTensor(logits, full_.tensors[loss].name + ".stats", pair);
    auto node = [&](const char* op, const std::string& suffix, std::vector<int> in, int o,
                    kernels::Attrs attrs) {
      NodeInfo k;
      k.name = n.name + suffix;
      k.op = op;
      k.inputs = std::move(in);
      k.outputs = {o};
      k.attrs = std::move(attrs);
      k.block = n.block;
      k.seed_id = n.seed_id;
      Emit(std::move(k));
    };
    node("vocab_max", ".max", {logits}, m, {});
    ReduceLast(m, true);
    node("vocab_ce_stats", ".stats", {logits, m, targets}, s, a);
    ReduceLast(s, false);
    node("vocab_ce_loss", "", {logits, m, s, targets}, loss, a);
    return OkStatus();
  }

  // Megatron's f: the gradient of a column-parallel linear's (replicated) input is each rank's
  // part of the sum, all-reduced once every consumer's backward ran.
  Status AddInputGradientReductions() {
    std::map<int, int> uses;
    for (const NodeInfo& n : g().nodes)
      for (int t : n.inputs) ++uses[t];
    std::vector<TpCollective> backward;
    for (const auto& [tensor, consumers] : column_consumers_) {
      if (uses[tensor] != static_cast<int>(consumers.size()))
        return InvalidArgumentError(
            "tensor parallelism (parallel.tensor " + Str(tp_) + "): \"" +
            full_.tensors[tensor].name +
            "\" feeds column-parallel linears and other nodes; its gradient would mix partial "
            "and whole parts");
      const int first = *std::min_element(consumers.begin(), consumers.end());
      backward.push_back({TpCollective::kAllReduce, first, true, tensor, -1, false});
    }
    std::sort(backward.begin(), backward.end(),
              [](const TpCollective& a, const TpCollective& b) { return a.boundary > b.boundary; });
    out_.collectives.insert(out_.collectives.end(), backward.begin(), backward.end());
    return OkStatus();
  }

  const Graph& full_;
  const int tp_, rank_;
  const bool sp_;
  int ids_ = -1;                 // the token ids (sp_gather's shape reference)
  std::map<int, int> chunk_of_;  // whole tensor -> its token chunk
  std::map<int, int> gathered_;  // token chunk -> its whole tensor
  std::set<int> sp_params_;      // parameters of nodes on chunks
  TpLocalGraph out_;
  std::map<int, const TpParamShard*> shard_of_;
  std::vector<State> state_;
  std::map<int, std::vector<int>> column_consumers_;  // tensor -> local consumer nodes
  std::map<int, int64_t> vocab_start_;                // vocab-split logits -> first column
};

}  // namespace

StatusOr<TpLocalGraph> TensorParallelGraph(const Graph& graph, int tp, int rank,
                                           bool sequence_parallel) {
  DS_ASSIGN_OR_RETURN(std::vector<TpParamShard> shards, TensorParallelShards(graph, tp, rank));
  if (tp == 1) {
    TpLocalGraph same;
    same.graph = graph;
    same.shards = std::move(shards);
    for (const TensorInfo& t : graph.tensors)
      same.replicated.push_back(t.role == TensorRole::kActivation);
    return same;
  }
  return Partitioner(graph, tp, rank, sequence_parallel, std::move(shards)).Run();
}

}  // namespace ds::parallel
