#include "parallel/tensor/tp_plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"
#include "runtime/plan/node_range.h"

namespace ds::parallel {

// The plan kit these write with (runtime/plan).
using plan::GridCoord;
using plan::GroupKind;
using plan::GroupKindName;
using plan::ModelFacts;
using plan::ParallelGrid;
using plan::SetNodeRange;
namespace {

using Ins = proto::Instruction;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end)

std::string Str(int64_t v) { return std::to_string(v); }

struct Cut {
  int id;  // index in TpLocalGraph::collectives
  int boundary;
  Ins act;            // the ACT_ALL_REDUCE (async when it has an overlap window)
  bool wait = false;  // only a mark: where collective `id`, posted earlier, must be complete
};

// Overlap windows (TpCollective::wait) while a rank's stream is built: the async collectives
// posted and not yet waited for (cut id -> index in the new stream), and the waits to add once
// the old indices are remapped (waiting instruction, posted one).
struct Windows {
  std::map<int, int> posted;
  std::vector<std::pair<int, int>> waits;
};

// The instruction of collective `c` (ACT_ALL_REDUCE, ACT_ALL_GATHER or ACT_REDUCE_SCATTER),
// sized for one micro-batch by `specs`; its count is the whole tensor's.
Ins ActCollective(const TpLocalGraph& local, const TpCollective& c,
                  const std::vector<TensorSpec>& specs, int tp) {
  Ins ins;
  const bool gather = c.kind == TpCollective::kAllGather;
  ins.set_kind(c.kind == TpCollective::kAllReduce  ? Ins::ACT_ALL_REDUCE
               : c.kind == TpCollective::kAllToAll ? Ins::ACT_ALL_TO_ALL
               : gather                            ? Ins::ACT_ALL_GATHER
                                                   : Ins::ACT_REDUCE_SCATTER);
  proto::ActivationRef* a = ins.mutable_activation();
  a->set_tensor(c.tensor);
  a->set_grad(c.backward);
  a->set_name(local.graph.tensors[c.tensor].name);
  a->set_out_tensor(c.out);
  const int64_t whole = specs[gather ? c.out : c.tensor].numel();
  if (c.kind == TpCollective::kAllToAll) {
    const Shape& shape = specs[c.tensor].shape;  // [blocks, block_rows, row_elements]
    a->set_capacity_tensor(c.capacity);
    a->set_block_rows(shape.at(1));
    a->set_row_elements(shape.at(2));
  }
  proto::Collective* col = ins.mutable_collective();
  col->set_group(c.group);
  col->set_count(whole);
  const bool split = c.kind == TpCollective::kAllGather || c.kind == TpCollective::kReduceScatter;
  for (int r = 0; split && r < tp; ++r) col->add_rank_counts(whole / tp);
  col->set_dtype(proto::DT_F32);
  col->set_bucket(-1);
  col->set_reduce_max(c.max);
  col->set_placement(proto::HOST);
  return ins;
}

// One compute instruction cut at `cuts` (ascending boundaries for FORWARD, descending for
// BACKWARD, each inside or at the end the instruction runs last): the segments, with the
// collectives between them. Allocations and waits stay on the first segment, frees on the last.
// A window's post (an async act) is recorded in `windows`; its mark makes the next segment wait
// for it (a mark at the instruction's end leaves the post synchronous).
void Split(const Graph& g, const Ins& in, const std::vector<const Cut*>& cuts,
           std::vector<Ins>* out, Windows* windows) {
  const bool fwd = in.kind() != Ins::BACKWARD;  // FORWARD or RECOMPUTE
  const int begin = in.node_begin(), end = in.node_end();
  const size_t first = out->size();
  std::vector<int> pending;    // posts the next segment waits for
  int at = fwd ? begin : end;  // where the next segment starts (FORWARD) or ends (BACKWARD)
  auto segment = [&](int b) {
    if (b == at) return;
    for (int post : pending) windows->waits.push_back({static_cast<int>(out->size()), post});
    pending.clear();
    Ins s = in;
    s.clear_allocs();
    s.clear_frees();
    s.clear_wait_for();
    s.clear_frees_before();
    s.set_computes_loss(in.computes_loss() && (fwd ? b == end : at == end));
    SetNodeRange(g, fwd ? at : b, fwd ? b : at, &s);
    out->push_back(std::move(s));
    at = b;
  };
  for (const Cut* c : cuts) {
    segment(c->boundary);
    if (c->wait) {
      auto it = windows->posted.find(c->id);
      if (it != windows->posted.end()) {
        pending.push_back(it->second);
        windows->posted.erase(it);
      }
      continue;
    }
    Ins act = c->act;
    act.set_micro_batch(in.micro_batch());
    if (act.async()) windows->posted[c->id] = static_cast<int>(out->size());
    out->push_back(std::move(act));
  }
  segment(fwd ? end : begin);
  for (int post : pending) (*out)[post].set_async(false);
  // The first and last compute segments carry the original's bookkeeping.
  size_t last = out->size(), lead = first;
  while (lead < out->size() && (*out)[lead].kind() != in.kind()) ++lead;
  for (size_t i = first; i < out->size(); ++i)
    if ((*out)[i].kind() == in.kind()) last = i;
  Ins& a = (*out)[lead];
  *a.mutable_allocs() = in.allocs();
  *a.mutable_wait_for() = in.wait_for();
  *a.mutable_frees_before() = in.frees_before();
  *(*out)[last].mutable_frees() = in.frees();
}

// The cuts that fall in compute instruction `in`: forward ones inside or at its end (FORWARD and
// RECOMPUTE: a recomputed row-parallel output is all-reduced again), backward ones inside or at
// its start.
std::vector<const Cut*> CutsOf(const Ins& in, const std::vector<Cut>& fwd,
                               const std::vector<Cut>& bwd) {
  std::vector<const Cut*> out;
  if (in.kind() == Ins::FORWARD || in.kind() == Ins::RECOMPUTE)
    for (const Cut& c : fwd)
      if (c.boundary > in.node_begin() && c.boundary <= in.node_end()) out.push_back(&c);
  if (in.kind() == Ins::BACKWARD)
    for (const Cut& c : bwd)
      if (c.boundary >= in.node_begin() && c.boundary < in.node_end()) out.push_back(&c);
  return out;
}

// dp rank d's shard positions of `flat` (an expert unit's chunks go by its edp rank, d / ep).
Ranges InShard(const proto::Plan& plan, int d, const Ranges& flat) {
  Ranges out;
  const int ep = std::max(1, plan.topology().ep());
  for (const proto::PartitionUnit& u : plan.partition().units()) {
    const int64_t own = u.offset() + (u.expert() ? d / ep : d) * u.chunk();
    const int64_t own_end = std::min(u.offset() + u.count(), own + u.chunk());
    for (auto [b, e] : flat) {
      const int64_t lo = std::max(b, own), hi = std::min(e, own_end);
      if (lo < hi) out.push_back({u.shard_offset() + lo - own, u.shard_offset() + hi - own});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The flat ranges of the parameters used on token chunks (sequence parallelism).
Ranges SpFlat(const TpLocalGraph& local, const ModelFacts& facts) {
  const std::vector<int> params = local.graph.Params();
  Ranges flat;
  for (size_t i = 0; i < params.size(); ++i)
    if (std::count(local.sp_params.begin(), local.sp_params.end(), params[i]))
      flat.push_back({facts.params[i].offset, facts.params[i].offset + facts.params[i].numel});
  std::sort(flat.begin(), flat.end());
  return flat;
}

// The flat ranges of the key / value boxes replicated over kv_share ranks (the same local
// positions on every tp rank).
Ranges KvFlat(const TpLocalGraph& local, const ModelFacts& facts) {
  Ranges flat;
  for (size_t i = 0; i < facts.params.size() && local.kv_share > 1; ++i)
    for (const FlatPiece& p : LocalToFull(local.shards[i], 0, facts.params[i].numel))
      if (p.box->share > 1)
        flat.push_back(
            {facts.params[i].offset + p.local, facts.params[i].offset + p.local + p.count});
  std::sort(flat.begin(), flat.end());
  return flat;
}

// A TP_GRAD_ALL_REDUCE over `group` of the gradients at `flat` (the flat gradients at stages
// 0-1, the shard's positions at 2-3), just before the norm, taking over its waits. Sequence
// parallelism: the parameters used on token chunks (each rank's gradient is its part of the
// sum); replicated key / value heads: their rows, over the ranks sharing them.
void AddGradReduce(const Ranges& flat, const std::string& group, const proto::Plan& plan,
                   int dp_rank, std::vector<Ins>* out) {
  const bool shard = plan.settings().zero_stage() >= 2;
  Ins ins;
  ins.set_kind(Ins::TP_GRAD_ALL_REDUCE);
  ins.set_micro_batch(-1);
  ins.set_in_shard(shard);
  int64_t count = 0;
  for (auto [b, e] : shard ? InShard(plan, dp_rank, flat) : flat) {
    proto::ParamRange* r = ins.add_ranges();
    r->set_offset(b);
    r->set_count(e - b);
    count += e - b;
  }
  proto::Collective* c = ins.mutable_collective();
  c->set_group(group);
  c->set_count(count);
  c->set_dtype(plan.settings().model_dtype());
  c->set_bucket(-1);
  c->set_placement(proto::HOST);
  for (size_t i = 0; i < out->size(); ++i) {
    Ins& norm = (*out)[i];
    if (norm.kind() != Ins::GRAD_NORM_REDUCE) continue;
    *ins.mutable_wait_for() = norm.wait_for();
    *ins.mutable_frees_before() = norm.frees_before();
    norm.clear_wait_for();
    norm.clear_frees_before();
    for (Ins& later : *out)  // indices after the insertion point move by one
      for (int& w : *later.mutable_wait_for())
        if (w >= static_cast<int>(i)) ++w;
    out->insert(out->begin() + i, std::move(ins));
    return;
  }
}

}  // namespace

Status InsertTpCollectives(const TpLocalGraph& local, const ModelFacts& facts, int64_t micro_batch,
                           int64_t seq_len, proto::Plan* plan) {
  DS_ASSIGN_OR_RETURN(
      std::vector<TensorSpec> specs,
      InferTensorSpecs(local.graph, {{"batch", micro_batch}, {"seq", seq_len}}, local.graph.name));
  const int tp = plan->topology().tp();
  std::vector<Cut> fwd, bwd;
  for (size_t k = 0; k < local.collectives.size(); ++k) {
    const TpCollective& c = local.collectives[k];
    std::vector<Cut>& list = c.backward ? bwd : fwd;
    list.push_back({static_cast<int>(k), c.boundary, ActCollective(local, c, specs, tp)});
    if (c.wait < 0) continue;
    list.back().act.set_async(true);
    list.push_back({static_cast<int>(k), c.wait, Ins(), true});
  }
  std::sort(fwd.begin(), fwd.end(),
            [](const Cut& a, const Cut& b) { return a.boundary < b.boundary; });
  std::sort(bwd.begin(), bwd.end(),
            [](const Cut& a, const Cut& b) { return a.boundary > b.boundary; });
  for (proto::RankPlan& rp : *plan->mutable_ranks()) {
    std::vector<Ins> out;
    std::vector<int> moved(rp.instructions_size(), -1);    // old index -> new
    std::vector<int> placed(local.collectives.size(), 0);  // micro-batches each cut went into
    Windows windows;
    for (int i = 0; i < rp.instructions_size(); ++i) {
      const Ins& in = rp.instructions(i);
      std::vector<const Cut*> cuts = CutsOf(in, fwd, bwd);
      if (cuts.empty()) {
        moved[i] = static_cast<int>(out.size());
        out.push_back(in);
        continue;
      }
      Split(local.graph, in, cuts, &out, &windows);
      moved[i] = static_cast<int>(out.size()) - 1;
      if (in.kind() != Ins::RECOMPUTE)
        for (const Cut* c : cuts) placed[c->id] += !c->wait;
    }
    const int gas = static_cast<int>(plan->settings().gradient_accumulation_steps());
    for (size_t k = 0; k < placed.size(); ++k)
      if (placed[k] != gas)
        return InternalError("plan: the collective of \"" +
                             local.graph.tensors[local.collectives[k].tensor].name + "\" fell in " +
                             Str(placed[k]) + " compute ranges for " + Str(gas) + " micro-batches");
    for (Ins& in : out)
      for (int& w : *in.mutable_wait_for()) w = moved.at(w);
    for (auto [waiting, post] : windows.waits) out[waiting].add_wait_for(post);
    for (auto [id, post] : windows.posted) out[post].set_async(false);  // never waited for
    if (!local.sp_params.empty())
      AddGradReduce(SpFlat(local, facts), kTpGroup, *plan, rp.rank(), &out);
    if (local.kv_share > 1) AddGradReduce(KvFlat(local, facts), kKvGroup, *plan, rp.rank(), &out);
    rp.clear_instructions();
    for (Ins& in : out) *rp.add_instructions() = std::move(in);
  }
  return OkStatus();
}

namespace {

// [begin, end) ranges minus `cut` (both sorted, disjoint).
Ranges Subtract(const Ranges& from, const Ranges& cut) {
  Ranges out;
  for (auto [b, e] : from) {
    for (auto [cb, ce] : cut) {
      if (ce <= b || cb >= e) continue;
      if (cb > b) out.push_back({b, cb});
      b = std::max(b, ce);
      if (b >= e) break;
    }
    if (b < e) out.push_back({b, e});
  }
  return out;
}

// The replicated parameters' flat ranges, and where they fall in dp rank `d`'s shard.
Ranges ReplicatedFlat(const ModelFacts& facts, const TpLocalGraph& local) {
  Ranges r;
  for (size_t i = 0; i < facts.params.size(); ++i)
    if (local.shards[i].replicated)
      r.push_back({facts.params[i].offset, facts.params[i].offset + facts.params[i].span});
  return r;
}

}  // namespace

void LeaveOutOfNorm(const proto::Plan& plan, int d, const Ranges& flat, Ins* in) {
  const Ranges cut = in->in_shard() ? InShard(plan, d, flat) : flat;
  Ranges have;
  for (const proto::ParamRange& r : in->ranges())
    have.push_back({r.offset(), r.offset() + r.count()});
  in->clear_ranges();
  for (auto [b, e] : Subtract(have, cut)) {
    proto::ParamRange* r = in->add_ranges();
    r->set_offset(b);
    r->set_count(e - b);
  }
}

namespace {

std::string GroupName(GroupKind kind, size_t index, size_t count) {
  const std::string base = GroupKindName(kind);
  return count == 1 ? base : base + "." + std::to_string(index);
}

// Each rank's group name of each kind (the kv groups' by rank in kv_name).
struct GroupNames {
  std::map<std::pair<GroupKind, int>, std::string> of;
  std::map<int, std::string> kv;
};

// The grid's dp, tp, pp and embedding groups (a group of one only for dp), then the replicated
// key / value heads' groups: consecutive runs of kv_share ranks within each tp group.
void AddGridGroups(const ParallelGrid& grid, int kv_share, proto::Plan* plan, GroupNames* names) {
  for (GroupKind kind : {GroupKind::kDp, GroupKind::kTp, GroupKind::kPp, GroupKind::kEmbedding}) {
    const auto groups = grid.Groups(kind);
    for (size_t i = 0; i < groups.size(); ++i) {
      if (kind != GroupKind::kDp && groups[i].size() < 2) continue;  // nothing to talk about
      proto::ProcessGroup* g = plan->add_groups();
      g->set_name(GroupName(kind, i, groups.size()));
      g->set_kind(GroupKindName(kind));
      for (int r : groups[i]) {
        g->add_ranks(r);
        names->of[{kind, r}] = g->name();
      }
    }
  }
  if (kv_share <= 1) return;
  int index = 0;
  for (const auto& ranks : grid.Groups(GroupKind::kTp))
    for (size_t b = 0; b < ranks.size(); b += kv_share, ++index) {
      proto::ProcessGroup* g = plan->add_groups();
      g->set_name(std::string(kKvGroup) + "." + std::to_string(index));
      g->set_kind(kKvGroup);
      for (size_t k = b; k < b + kv_share; ++k) {
        g->add_ranks(ranks[k]);
        names->kv[ranks[k]] = g->name();
      }
    }
}

// The expert, expert-data-parallel, Ulysses and hpZ groups, and with tp the world group.
void AddOtherGroups(const ParallelGrid& grid, proto::Plan* plan, GroupNames* names) {
  for (GroupKind kind :
       {GroupKind::kEp, GroupKind::kSp, GroupKind::kEdp, GroupKind::kHpz, GroupKind::kHpzAcross}) {
    const auto groups = grid.Groups(kind);
    for (size_t i = 0; i < groups.size(); ++i) {
      proto::ProcessGroup* g = plan->add_groups();
      g->set_name(std::string(GroupKindName(kind)) + "." + std::to_string(i));
      g->set_kind(GroupKindName(kind));
      for (int r : groups[i]) {
        g->add_ranks(r);
        names->of[{kind, r}] = g->name();
      }
    }
  }
  if (grid.tp() <= 1) return;
  proto::ProcessGroup* g = plan->add_groups();
  g->set_name(kWorldGroup);
  g->set_kind(kWorldGroup);
  for (int r = 0; r < grid.world(); ++r) g->add_ranks(r);
}

// What world rank w's copy of its dp plan needs per collective: the norm's and overflow's over
// the world (each rank's share counted once), the aux loss over the world, every other group
// by its name for w.
struct RankGroups {
  const ParallelGrid& grid;
  const TpLocalGraph& local;
  const GroupNames& names;
  const Ranges &replicated, &kv;
  const proto::Plan& plan;

  void Assign(int w, Ins* in) const {
    const GridCoord at = grid.CoordOf(w);
    proto::Collective* c = in->mutable_collective();
    const bool scalar = in->kind() == Ins::GRAD_NORM_REDUCE || in->kind() == Ins::OVERFLOW_REDUCE;
    if (grid.tp() > 1 && scalar) {  // every rank's share of the whole model's norm
      c->set_group(kWorldGroup);
      c->set_placement(proto::HOST);
      // Counted once: replicated parameters on tp rank 0, shared kv heads on the first rank
      // holding them.
      Ranges cut = at.tp > 0 ? replicated : Ranges();
      if (local.kv_share > 1 && at.tp % local.kv_share != 0)
        cut.insert(cut.end(), kv.begin(), kv.end());
      std::sort(cut.begin(), cut.end());
      if (in->kind() == Ins::GRAD_NORM_REDUCE && !cut.empty()) LeaveOutOfNorm(plan, at.dp, cut, in);
    } else if (in->kind() == Ins::LOSS_REDUCE && local.aux_per_rank) {
      c->set_group(kWorldGroup);  // the tp ranks' aux losses are their chunks'
      c->set_placement(proto::HOST);
    } else if (c->group() == kKvGroup) {
      c->set_group(names.kv.at(w));
    } else if (!c->group().empty()) {
      c->set_group(names.of.at({KindOf(c->group()), w}));
    }
    for (std::string& g : *c->mutable_hierarchy()) g = names.of.at({KindOf(g), w});
  }

  // The group kind a dp plan's collective names.
  static GroupKind KindOf(const std::string& group) {
    if (group == kTpGroup) return GroupKind::kTp;
    if (group == kEpGroup) return GroupKind::kEp;
    if (group == kSpGroup) return GroupKind::kSp;
    if (group == kEdpGroup) return GroupKind::kEdp;
    if (group == kHpzGroup) return GroupKind::kHpz;
    if (group == kHpzAcrossGroup) return GroupKind::kHpzAcross;
    return GroupKind::kDp;
  }
};

}  // namespace

Status ExpandToGrid(const ParallelGrid& grid, const ModelFacts& facts, const TpLocalGraph& local,
                    proto::Plan* plan) {
  plan->clear_groups();
  GroupNames names;
  AddGridGroups(grid, local.kv_share, plan, &names);
  AddOtherGroups(grid, plan, &names);
  const Ranges replicated = ReplicatedFlat(facts, local), kv = KvFlat(local, facts);
  const RankGroups groups{grid, local, names, replicated, kv, *plan};
  std::vector<proto::RankPlan> dp_plans(plan->ranks().begin(), plan->ranks().end());
  plan->clear_ranks();
  for (int w = 0; w < grid.world(); ++w) {
    proto::RankPlan* rp = plan->add_ranks();
    *rp = dp_plans.at(grid.CoordOf(w).dp);
    rp->set_rank(w);
    for (Ins& in : *rp->mutable_instructions())
      if (in.has_collective()) groups.Assign(w, &in);
  }
  return OkStatus();
}

}  // namespace ds::parallel
