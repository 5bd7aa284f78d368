#include "parallel/tensor/checkpoint_plan.h"

#include <algorithm>
#include <string>

#include "parallel/tensor/tp_plan.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"
#include "runtime/plan/node_range.h"

namespace ds::parallel {

// The plan kit these write with (runtime/plan).
using plan::ModelFacts;
using plan::ParallelGrid;
using plan::SetNodeRange;
namespace {

using Ins = proto::Instruction;

struct Checkpoint {
  int tensor = -1;
  int producer = -1;       // the node that writes it
  int segment_begin = -1;  // the first node of the segment that reads it
  int64_t count = 0;       // elements of the whole tensor, one micro-batch
  int parts = 1;
};

Ins Stash(const Graph& g, const Checkpoint& c, int micro) {
  Ins ins;
  ins.set_kind(Ins::CHECKPOINT_STASH);
  ins.set_micro_batch(micro);
  ins.mutable_activation()->set_tensor(c.tensor);
  ins.mutable_activation()->set_name(g.tensors[c.tensor].name);
  return ins;
}

// The tp group's slices all-gathered back (partition_activations, CHECKPOINT_RESTORE); one part
// (cpu_checkpointing) is a copy from host memory back to the device (CHECKPOINT_RELOAD).
Ins Restore(const Graph& g, const Checkpoint& c, int micro) {
  Ins ins = Stash(g, c, micro);
  if (c.parts == 1) {
    ins.set_kind(Ins::CHECKPOINT_RELOAD);
    return ins;
  }
  ins.set_kind(Ins::CHECKPOINT_RESTORE);
  proto::Collective* col = ins.mutable_collective();
  col->set_group(kTpGroup);
  col->set_count(c.count);
  for (int r = 0; r < c.parts; ++r) col->add_rank_counts(c.count / c.parts);
  col->set_dtype(proto::DT_F32);
  col->set_bucket(-1);
  col->set_placement(proto::HOST);
  return ins;
}

// FORWARD `in` cut after each checkpoint's producer inside it, each piece followed by its
// stashes; the stashes of checkpoints its last node writes go to `pending` (they follow the tp
// collectives at that point). Allocations and waits stay on the first piece, frees on the last.
void CutForward(const Graph& g, const Ins& in, const std::vector<Checkpoint>& cps,
                std::vector<Ins>* out, std::vector<Ins>* pending) {
  std::vector<const Checkpoint*> inside;
  for (const Checkpoint& c : cps)
    if (c.producer >= in.node_begin() && c.producer < in.node_end()) inside.push_back(&c);
  std::stable_sort(inside.begin(), inside.end(), [](const Checkpoint* a, const Checkpoint* b) {
    return a->producer < b->producer;
  });
  const size_t first = out->size();
  int at = in.node_begin();
  for (const Checkpoint* c : inside) {
    const int cut = c->producer + 1;
    if (cut == in.node_end()) {
      pending->push_back(Stash(g, *c, in.micro_batch()));
      continue;
    }
    if (cut > at) {
      Ins piece = in;
      SetNodeRange(g, at, cut, &piece);
      piece.set_computes_loss(false);
      piece.clear_frees();
      out->push_back(std::move(piece));
      at = cut;
    }
    out->push_back(Stash(g, *c, in.micro_batch()));
  }
  Ins last = in;
  SetNodeRange(g, at, in.node_end(), &last);
  out->push_back(std::move(last));
  for (size_t i = first + 1; i < out->size(); ++i) {
    Ins& x = (*out)[i];
    if (x.kind() != Ins::FORWARD) continue;
    x.clear_allocs();
    x.clear_wait_for();
    x.clear_frees_before();
  }
}

bool IsCompute(Ins::Kind k) {
  return k == Ins::FORWARD || k == Ins::RECOMPUTE || k == Ins::BACKWARD;
}

// One rank's stream with the stashes and restores; `stashed` and `restored` count them.
std::vector<Ins> Insert(const Graph& g, const std::vector<Checkpoint>& cps, proto::RankPlan* rp,
                        std::vector<int>* stashed, std::vector<int>* restored) {
  std::vector<Ins> out, pending;
  std::vector<int> moved(rp->instructions_size(), -1);
  for (int i = 0; i < rp->instructions_size(); ++i) {
    const Ins& in = rp->instructions(i);
    if (IsCompute(in.kind())) {
      for (Ins& s : pending) out.push_back(std::move(s));
      pending.clear();
    }
    if (in.kind() == Ins::RECOMPUTE)
      for (size_t c = 0; c < cps.size(); ++c)
        if (cps[c].segment_begin == in.node_begin()) {
          out.push_back(Restore(g, cps[c], in.micro_batch()));
          ++(*restored)[c];
        }
    if (in.kind() == Ins::FORWARD)
      for (size_t c = 0; c < cps.size(); ++c)
        if (cps[c].producer >= in.node_begin() && cps[c].producer < in.node_end()) ++(*stashed)[c];
    if (in.kind() == Ins::FORWARD) {
      CutForward(g, in, cps, &out, &pending);
    } else {
      out.push_back(in);
    }
    moved[i] = static_cast<int>(out.size()) - 1;
  }
  for (Ins& s : pending) out.push_back(std::move(s));
  for (Ins& in : out)
    for (int& w : *in.mutable_wait_for()) w = moved.at(w);
  return out;
}

}  // namespace

Status InsertCheckpointPartition(const Graph& graph, const std::vector<RecomputeSegment>& segments,
                                 int64_t micro_batch, int64_t seq_len, proto::Plan* plan) {
  std::vector<Checkpoint> cps;
  bool any = false;
  for (const RecomputeSegment& s : segments) any = any || !s.partitioned.empty();
  if (!any) return OkStatus();
  DS_ASSIGN_OR_RETURN(
      std::vector<TensorSpec> specs,
      InferTensorSpecs(graph, {{"batch", micro_batch}, {"seq", seq_len}}, graph.name));
  for (const RecomputeSegment& s : segments)
    for (int t : s.partitioned) {
      Checkpoint c{t, -1, s.node_begin, specs[t].numel(), s.parts};
      for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n)
        for (int o : graph.nodes[n].outputs)
          if (o == t) c.producer = n;
      cps.push_back(c);
    }
  const int gas = static_cast<int>(plan->settings().gradient_accumulation_steps());
  for (proto::RankPlan& rp : *plan->mutable_ranks()) {
    std::vector<int> stashed(cps.size(), 0), restored(cps.size(), 0);
    std::vector<Ins> out = Insert(graph, cps, &rp, &stashed, &restored);
    for (size_t c = 0; c < cps.size(); ++c)
      if (stashed[c] != gas || restored[c] != gas)
        return InternalError(
            "plan: the partitioned checkpoint \"" + graph.tensors[cps[c].tensor].name +
            "\" is stashed " + std::to_string(stashed[c]) + " and restored " +
            std::to_string(restored[c]) + " times for " + std::to_string(gas) + " micro-batches");
    rp.clear_instructions();
    for (Ins& in : out) *rp.add_instructions() = std::move(in);
  }
  return OkStatus();
}

}  // namespace ds::parallel
