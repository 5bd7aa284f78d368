#include "runtime/planner/inference_plan.h"

#include <algorithm>
#include <utility>

#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

Ins Forward(int begin, int end) {
  Ins f;
  f.set_kind(Ins::FORWARD);
  f.set_micro_batch(0);
  f.set_node_begin(begin);
  f.set_node_end(end);
  return f;
}

// A collective on the tp group over tensor `t` of `g`: `count` elements per token and sequence.
Ins OnTp(Ins::Kind kind, const Graph& g, int t, int64_t count) {
  Ins c;
  c.set_kind(kind);
  c.set_micro_batch(0);
  proto::ActivationRef* a = c.mutable_activation();
  a->set_tensor(t);
  a->set_name(g.tensors[t].name);
  a->set_out_tensor(-1);
  a->set_capacity_tensor(-1);
  proto::Collective* k = c.mutable_collective();
  k->set_group("tp");
  k->set_count(count);
  k->set_dtype(proto::DT_F32);
  k->set_placement(proto::HOST);
  k->set_bucket(-1);
  return c;
}

// The rank's part: the tp graph of the decode graph, its caches' kv heads from their shapes.
Status Partition(int tp, int rank, InferencePlan* p) {
  DS_ASSIGN_OR_RETURN(parallel::TpLocalGraph local,
                      parallel::TensorParallelGraph(p->decode.graph, tp, rank));
  const std::string logits = p->decode.graph.tensors[p->decode.logits].name;
  p->decode.graph = std::move(local.graph);
  p->decode.logits = p->decode.graph.FindTensor(logits);
  for (CacheLayer& c : p->decode.layers)
    c.n_kv_head = p->decode.graph.tensors[p->decode.graph.FindTensor(c.k)].shape[1].size;
  p->shards = std::move(local.shards);
  DS_ASSIGN_OR_RETURN(
      std::vector<TensorSpec> specs,
      InferTensorSpecs(p->decode.graph, {{"batch", 1}, {"seq", 1}}, p->decode.graph.name));
  int begin = 0;
  for (const parallel::TpCollective& c : local.collectives) {
    if (c.backward) continue;
    if (c.kind != parallel::TpCollective::kAllReduce || c.group != "tp" || c.max)
      return InvalidArgumentError("generation: the tensor-parallel graph of " +
                                  p->decode.graph.name +
                                  " needs a collective other than a sum "
                                  "all-reduce on the tp group, at \"" +
                                  p->decode.graph.tensors[c.tensor].name + "\"");
    if (c.boundary > begin) p->stream.push_back(Forward(begin, c.boundary));
    begin = std::max(begin, c.boundary);
    const int64_t n = specs[c.tensor].numel();
    p->stream.push_back(OnTp(Ins::ACT_ALL_REDUCE, p->decode.graph, c.tensor, n));
    p->reduced_per_token += n;
  }
  p->stream.push_back(Forward(begin, static_cast<int>(p->decode.graph.nodes.size())));
  p->vocab_local = specs[p->decode.logits].shape.back();
  if (p->vocab_local * tp == p->decode.vocab && tp > 1) {  // a vocab-parallel head
    p->stream.push_back(
        OnTp(Ins::ACT_ALL_GATHER, p->decode.graph, p->decode.logits, p->vocab_local));
    p->gathered_per_token = p->vocab_local;
  } else if (p->vocab_local != p->decode.vocab) {
    return InvalidArgumentError("generation: rank " + Str(rank) + "'s logits of " +
                                p->decode.graph.name + " are " + Str(p->vocab_local) +
                                " wide, neither the vocabulary of " + Str(p->decode.vocab) +
                                " nor its 1/" + Str(tp));
  }
  return OkStatus();
}

}  // namespace

StatusOr<InferencePlan> MakeInferencePlan(const Graph& model, int64_t max_len, int tp,
                                          int tp_rank) {
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
    return InvalidArgumentError("generation: tp rank " + Str(tp_rank) + " of " + Str(tp));
  InferencePlan p;
  p.tp = tp;
  p.tp_rank = tp_rank;
  DS_ASSIGN_OR_RETURN(p.decode, DecodeGraph(model, max_len));
  if (tp == 1) {
    p.stream.push_back(Forward(0, static_cast<int>(p.decode.graph.nodes.size())));
    p.vocab_local = p.decode.vocab;
    return p;
  }
  DS_RETURN_IF_ERROR(Partition(tp, tp_rank, &p));
  return p;
}

}  // namespace ds::planner
