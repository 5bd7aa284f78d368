#include "parallel/pipeline/pipe_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "parallel/pipeline/rank_chunks.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"

namespace ds::parallel {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// Where each whole-graph tensor is produced and read.
struct Uses {
  std::vector<int> producer;
  std::vector<std::vector<int>> readers;
};

// The node adding the MoE layers' aux losses to the loss (runtime/graph/moe_builder.h), -1 if
// none: each stage adds its own layers' terms instead (their gradient is the constant coeff, so
// no stage needs another's), and the step's loss reduction sums the stages' parts.
int AuxLossNode(const Graph& g) {
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
    if (g.nodes[n].op == "moe_loss" && g.loss >= 0 &&
        g.nodes[n].outputs == std::vector<int>{g.loss})
      return n;
  return -1;
}

// Reads by the aux-loss node are left out: no aux loss crosses a boundary.
Uses FindUses(const Graph& g) {
  Uses u;
  u.producer.assign(g.tensors.size(), -1);
  u.readers.resize(g.tensors.size());
  const int aux = AuxLossNode(g);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    if (n != aux)
      for (int t : g.nodes[n].inputs) u.readers[t].push_back(n);
    for (int t : g.nodes[n].outputs) u.producer[t] = n;
  }
  return u;
}

// How a boundary tensor crosses: its width and the token chunks it is split into (sequence
// parallelism's [tokens / chunks, width]; 1: [batch, seq, width]).
struct Crossing {
  int64_t width = 0, chunks = 1;
};

class StageBuilder {
 public:
  StageBuilder(const Graph& g, const PipelineStage& s, const TokenShape& tokens,
               const std::vector<TensorSpec>* specs)
      : g_(g),
        s_(s),
        uses_(FindUses(g)),
        aux_node_(AuxLossNode(g)),
        tokens_(tokens),
        specs_(specs) {}

  StatusOr<PipeStageGraph> Run() {
    out_.graph = g_;
    out_.graph.tensors.clear();
    out_.graph.nodes.clear();
    const bool last = s_.node_end == static_cast<int>(g_.nodes.size());
    std::set<int> recv, send;
    for (int n = s_.node_begin; n < s_.node_end; ++n) {
      if (n == aux_node_) continue;
      for (int t : g_.nodes[n].inputs)
        if (IsActivation(t) && uses_.producer[t] < s_.node_begin) recv.insert(t);
      for (int t : g_.nodes[n].outputs)
        for (int r : uses_.readers[t])
          if (r >= s_.node_end) send.insert(t);
    }
    const int ids = g_.FindTensor("ids");
    if (ids < 0) return InvalidArgumentError("pipeline: graph " + g_.name + " has no ids input");
    for (int t : recv) DS_RETURN_IF_ERROR(Recv(t, Local(ids)));
    for (int n = s_.node_begin; n < s_.node_end; ++n)
      if (n != aux_node_) Copy(n);
    if (!last) DS_RETURN_IF_ERROR(Send(send, Local(ids)));
    const int main_loss = aux_node_ >= 0 ? g_.nodes[aux_node_].inputs[0] : g_.loss;
    out_.graph.loss = AddAuxLosses(last ? Local(main_loss) : loss_);
    out_.node_begin = s_.node_begin;
    out_.node_end = s_.node_end;
    return std::move(out_);
  }

 private:
  bool IsActivation(int t) const { return g_.tensors[t].role == TensorRole::kActivation; }

  // The local index of whole tensor `t`, added on first use.
  int Local(int t) {
    auto it = local_.find(t);
    if (it != local_.end()) return it->second;
    out_.graph.tensors.push_back(g_.tensors[t]);
    out_.whole.push_back(t);
    return local_[t] = static_cast<int>(out_.graph.tensors.size()) - 1;
  }
  int New(TensorInfo info) {
    out_.graph.tensors.push_back(std::move(info));
    out_.whole.push_back(-1);
    return static_cast<int>(out_.graph.tensors.size()) - 1;
  }
  // A pipe_recv node writing tensor `local`, from the ids and how it crosses.
  void EmitRecv(int local, int ids, int block, const Crossing& x) {
    const TensorInfo& t = out_.graph.tensors[local];
    NodeInfo n;
    n.name = t.name + ".recv";
    n.op = "pipe_recv";
    n.inputs = {ids};
    n.outputs = {local};
    n.attrs.SetInt("width", x.width);
    if (x.chunks > 1) n.attrs.SetInt("chunks", x.chunks);
    n.block = block;
    out_.graph.nodes.push_back(std::move(n));
  }

  // [batch, seq, width] by its shape, or (a shape left to inference: sequence parallelism's
  // token chunks) [tokens / chunks, width] by its inferred spec.
  StatusOr<Crossing> CrossingOf(int t) const {
    const SymShape& shape = g_.tensors[t].shape;
    if (shape.size() == 3 && shape[0].symbol == "batch" && shape[1].symbol == "seq" &&
        shape[2].symbol.empty())
      return Crossing{shape[2].size, 1};
    const int64_t tokens = tokens_.batch * tokens_.seq;
    if (shape.empty() && specs_ && t < static_cast<int>(specs_->size())) {
      const Shape& real = (*specs_)[t].shape;
      if (real.size() == 2 && real[0] > 0 && tokens % real[0] == 0)
        return Crossing{real[1], tokens / real[0]};
    }
    return InvalidArgumentError("pipeline: tensor \"" + g_.tensors[t].name + "\" " +
                                SymShapeToString(shape) +
                                " crosses a stage boundary; only [batch, seq, width] activations "
                                "and sequence parallelism's [tokens / tp, width] chunks can");
  }

  Status Recv(int t, int ids) {
    DS_ASSIGN_OR_RETURN(Crossing x, CrossingOf(t));
    const int local = Local(t);
    EmitRecv(local, ids, s_.first_block, x);
    out_.recv.push_back(local);
    return OkStatus();
  }
  void Copy(int n) {
    NodeInfo node = g_.nodes[n];
    if (node.seed_id < 0) node.seed_id = n;
    for (int& t : node.inputs) t = Local(t);
    for (int& t : node.outputs) t = Local(t);
    out_.graph.nodes.push_back(std::move(node));
  }
  // The stage's objective: `loss` plus coeff x its own MoE layers' aux losses (a copy of the aux
  // node on the stage's terms); `loss` itself when the stage has no MoE layer.
  int AddAuxLosses(int loss) {
    if (aux_node_ < 0) return loss;
    NodeInfo n = g_.nodes[aux_node_];
    n.inputs = {loss};
    for (size_t i = 1; i < g_.nodes[aux_node_].inputs.size(); ++i) {
      const int t = g_.nodes[aux_node_].inputs[i];
      if (uses_.producer[t] >= s_.node_begin && uses_.producer[t] < s_.node_end)
        n.inputs.push_back(Local(t));
    }
    if (n.inputs.size() == 1) return loss;
    if (n.seed_id < 0) n.seed_id = aux_node_;
    n.block = s_.last_block;
    TensorInfo total = g_.tensors[g_.loss];
    total.name = loss == loss_ ? "stage.loss_terms" : total.name;
    const int out = loss == loss_ ? New(total) : Local(g_.loss);
    n.outputs = {out};
    out_.graph.nodes.push_back(std::move(n));
    return out;
  }

  Status Send(const std::set<int>& send, int ids) {
    NodeInfo n;
    n.name = "stage.send";
    n.op = "pipe_send";
    n.block = s_.last_block;
    for (int t : send) {
      DS_ASSIGN_OR_RETURN(Crossing c, CrossingOf(t));
      const int x = Local(t);
      TensorInfo grad = g_.tensors[t];
      grad.name += ".grad_in";
      const int gi = New(grad);
      EmitRecv(gi, ids, s_.last_block, c);
      out_.send.push_back(x);
      out_.send_count.push_back(tokens_.batch * tokens_.seq / c.chunks * c.width);
      out_.send_grad.push_back(gi);
      n.inputs.push_back(x);
      n.inputs.push_back(gi);
    }
    TensorInfo loss;
    loss.name = "stage.loss";
    loss.shape = {Dim::Fixed(1)};
    loss.role = TensorRole::kActivation;
    loss_ = New(loss);
    n.outputs = {loss_};
    out_.graph.nodes.push_back(std::move(n));
    return OkStatus();
  }

  const Graph& g_;
  const PipelineStage& s_;
  const Uses uses_;
  const int aux_node_;
  const TokenShape tokens_;
  const std::vector<TensorSpec>* specs_;
  PipeStageGraph out_;
  std::map<int, int> local_;
  int loss_ = -1;
};

}  // namespace

StatusOr<std::vector<PipeStageGraph>> StageGraphs(const Graph& graph,
                                                  const std::vector<PipelineStage>& stages,
                                                  const TokenShape& tokens) {
  std::vector<int> stage_of(graph.nodes.size(), -1);
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].node_begin < 0 || stages[s].node_end > static_cast<int>(graph.nodes.size()) ||
        stages[s].node_begin >= stages[s].node_end)
      return InvalidArgumentError("pipeline: stage " + Str(s) + " nodes [" +
                                  Str(stages[s].node_begin) + ", " + Str(stages[s].node_end) +
                                  ") of graph " + graph.name);
    for (int n = stages[s].node_begin; n < stages[s].node_end; ++n) stage_of[n] = s;
  }
  // Each boundary tensor is read by its own stage and the next one only.
  const Uses uses = FindUses(graph);
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (graph.tensors[t].role != TensorRole::kActivation || uses.producer[t] < 0) continue;
    const int from = stage_of[uses.producer[t]];
    for (int r : uses.readers[t])
      if (stage_of[r] != from && stage_of[r] != from + 1)
        return InvalidArgumentError("pipeline: tensor \"" + graph.tensors[t].name + "\" of stage " +
                                    Str(from) + " is read by node \"" + graph.nodes[r].name +
                                    "\" of stage " + Str(stage_of[r]) +
                                    "; only the next stage may read it");
  }
  // Sequence parallelism's token chunks have their shapes inferred: at the job's batch and seq.
  std::vector<TensorSpec> inferred;
  const std::vector<TensorSpec>* specs = nullptr;
  if (tokens.batch > 0 && tokens.seq > 0) {
    auto got = InferTensorSpecs(graph, {{"batch", tokens.batch}, {"seq", tokens.seq}}, graph.name);
    if (got.ok()) {
      inferred = std::move(got).value();
      specs = &inferred;
    }
  }
  std::vector<PipeStageGraph> out;
  for (const PipelineStage& s : stages) {
    DS_ASSIGN_OR_RETURN(PipeStageGraph g, StageBuilder(graph, s, tokens, specs).Run());
    out.push_back(std::move(g));
  }
  return out;
}

StatusOr<TpLocalGraph> StageTpLocal(const TpLocalGraph& local, const PipeStageGraph& stage) {
  TpLocalGraph out;
  out.graph = stage.graph;
  out.kv_share = local.kv_share;
  out.aux_per_rank = local.aux_per_rank;
  std::map<int, int> of_whole;  // local.graph tensor -> stage tensor
  for (size_t t = 0; t < stage.whole.size(); ++t)
    if (stage.whole[t] >= 0) of_whole[stage.whole[t]] = static_cast<int>(t);
  std::map<int, int> param_index;  // local.graph tensor -> its index in local's parameter order
  const std::vector<int> params = local.graph.Params();
  for (size_t i = 0; i < params.size(); ++i) param_index[params[i]] = static_cast<int>(i);
  for (int t : out.graph.Params())
    out.shards.push_back(local.shards[param_index.at(stage.whole[t])]);
  out.replicated.assign(out.graph.tensors.size(), false);
  for (size_t t = 0; t < stage.whole.size(); ++t)
    if (stage.whole[t] >= 0 && stage.whole[t] < static_cast<int>(local.replicated.size()))
      out.replicated[t] = local.replicated[stage.whole[t]];
  const int shift = static_cast<int>(stage.recv.size()) - stage.node_begin;  // pipe_recv first
  for (const TpCollective& c : local.collectives) {
    if (c.boundary <= stage.node_begin || c.boundary >= stage.node_end) continue;
    TpCollective m = c;
    m.boundary = c.boundary + shift;
    if (m.wait >= 0) m.wait += shift;  // an overlap window lies within its layer
    for (int* t : {&m.tensor, &m.out, &m.capacity}) {
      if (*t < 0) continue;
      auto it = of_whole.find(*t);
      if (it == of_whole.end())
        return InvalidArgumentError("pipeline: the tensor-parallel collective on \"" +
                                    local.graph.tensors[*t].name + "\" is not in stage nodes [" +
                                    Str(stage.node_begin) + ", " + Str(stage.node_end) + ")");
      *t = it->second;
    }
    out.collectives.push_back(m);
  }
  for (int t : local.sp_params)
    if (of_whole.count(t)) out.sp_params.push_back(of_whole.at(t));
  return out;
}

StatusOr<std::vector<PipeStageGraph>> PipelineStageGraphs(const Graph& graph, int pp,
                                                          const plan::PlanConfig& c) {
  DS_ASSIGN_OR_RETURN(std::vector<PipelineStage> stages,
                      PartitionStages(graph, pp * c.virtual_stages, c.partition_method,
                                      c.micro_batch_size, c.seq_len));
  return StageGraphs(graph, stages, {c.micro_batch_size, c.seq_len});
}

Graph PipelineRankGraph(const std::vector<PipeStageGraph>& stages, int pp, int rank) {
  std::vector<const Graph*> chunks;
  for (size_t s = rank; s < stages.size(); s += pp) chunks.push_back(&stages[s].graph);
  return RankChunksGraph(chunks);
}

}  // namespace ds::parallel
