#include "runtime/plan/pipe_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/plan/memory_timeline.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/plan/pipe_streams.h"
#include "runtime/plan/plan_builder.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/plan/plan_view.h"
#include "runtime/plan/tp_plan.h"

namespace ds::plan {
namespace {

using Ins = proto::Instruction;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

std::string Str(int64_t v) { return std::to_string(v); }

Status NotYet(const std::string& what) {
  return UnimplementedError("plan: parallel.pipeline with " + what + " is not planned yet");
}

Status CheckScope(const Topology& topo, const PlanConfig& c) {
  if (topo.tp > 1) return NotYet("parallel.tensor " + Str(topo.tp) + " (tensor x pipeline)");
  if (c.stage == 3) return NotYet("zero_optimization.stage 3");
  if (c.recompute != RecomputeMode::kNone)
    return NotYet("training.recompute / activation_checkpointing");
  if (c.optimizer_nvme) return NotYet("offload_optimizer device nvme");
  if (c.states_on_device) return NotYet("the model states on the device (device.type cuda)");
  return OkStatus();
}

bool IsCompute(const Ins& in) {
  return in.micro_batch() >= 0 && (in.kind() == Ins::LOAD_MICROBATCH || in.kind() == Ins::FORWARD ||
                                   in.kind() == Ins::BACKWARD);
}

// A stage plan's stream cut where the schedule's compute goes: what comes before the first
// micro-batch, each micro-batch's LOAD / FORWARD / BACKWARD, and what follows its backward.
struct ZeroStream {
  std::vector<int> prefix;
  std::vector<int> load, forward, backward;  // per micro-batch: D index
  std::vector<std::vector<int>> post;        // per micro-batch
};

StatusOr<ZeroStream> CutZeroStream(const proto::RankPlan& d, int m) {
  ZeroStream z;
  z.post.resize(m);
  const auto& list = d.instructions();
  int i = 0;
  for (; i < list.size() && !IsCompute(list[i]); ++i) z.prefix.push_back(i);
  for (int mb = 0; mb < m; ++mb) {
    const Ins::Kind want[3] = {Ins::LOAD_MICROBATCH, Ins::FORWARD, Ins::BACKWARD};
    for (int k = 0; k < 3; ++k, ++i)
      if (i >= list.size() || list[i].kind() != want[k] || list[i].micro_batch() != mb)
        return InternalError(
            "plan: a pipeline stage's ZeRO stream is not one LOAD, FORWARD and "
            "BACKWARD per micro-batch (micro-batch " +
            Str(mb) + ")");
    z.load.push_back(i - 3);
    z.forward.push_back(i - 2);
    z.backward.push_back(i - 1);
    for (; i < list.size() && !IsCompute(list[i]); ++i) {
      if (list[i].kind() == Ins::RECOMPUTE || list[i].kind() == Ins::GATHER_PARAMS)
        return InternalError("plan: a pipeline stage's ZeRO stream has " +
                             Ins::Kind_Name(list[i].kind()));
      z.post[mb].push_back(i);
    }
  }
  if (i != list.size())
    return InternalError("plan: a pipeline stage's ZeRO stream has compute past micro-batch " +
                         Str(m - 1));
  return z;
}

// What one world rank's stream is made of.
struct MergeInput {
  const proto::RankPlan* zero;       // the stage plan's stream of this dp rank (D)
  const std::vector<Ins>* pipe;      // the schedule's stream of this pipeline rank (S)
  std::set<int> activation_buffers;  // per micro-batch buffers: counted once per slot
  const Ins* tied = nullptr;         // TIED_GRAD_ALL_REDUCE, before the last reductions
};

class Merger {
 public:
  explicit Merger(const MergeInput& in) : in_(in), d_(in.zero->instructions()) {}

  StatusOr<std::vector<Ins>> Run(int m) {
    DS_ASSIGN_OR_RETURN(z_, CutZeroStream(*in_.zero, m));
    from_d_.assign(d_.size(), -1);
    for (int i : z_.prefix) EmitD(i);
    const std::vector<Ins>& s = *in_.pipe;
    // Per micro-batch, the schedule's first forward and first and last backward (a rank's
    // chunks each run one): the stage plan's buffers and waits go on the first, its
    // reductions after the last.
    std::vector<int> first_fwd(m, -1), first_bwd(m, -1), last_bwd(m, -1);
    int last_backward = -1;
    for (int k = 0; k < static_cast<int>(s.size()); ++k) {
      const int mb = s[k].micro_batch();
      if (s[k].kind() == Ins::FORWARD && first_fwd.at(mb) < 0) first_fwd[mb] = k;
      if (s[k].kind() != Ins::BACKWARD) continue;
      if (first_bwd.at(mb) < 0) first_bwd[mb] = k;
      last_bwd[mb] = last_backward = k;
    }
    std::vector<int> from_s(s.size(), -1);
    bool loaded = false, forwarded = false;
    for (int k = 0; k < static_cast<int>(s.size()); ++k) {
      Ins x = s[k];
      for (int& w : *x.mutable_wait_for()) w = from_s.at(w);
      const int mb = x.micro_batch();
      if (x.kind() == Ins::LOAD_MICROBATCH) {
        Attach(d_[z_.load.at(mb)], /*acts=*/!loaded, &x);
        loaded = true;
        from_d_[z_.load[mb]] = Size();
      } else if (x.kind() == Ins::FORWARD && k == first_fwd[mb]) {
        Attach(d_[z_.forward.at(mb)], !forwarded, &x);
        forwarded = true;
        from_d_[z_.forward[mb]] = Size();
      } else if (x.kind() == Ins::BACKWARD) {
        const Ins& b = d_[z_.backward.at(mb)];
        if (k == first_bwd[mb]) {
          Attach(b, false, &x);
          from_d_[z_.backward[mb]] = Size();
        }
        if (k == last_backward)
          for (int id : in_.activation_buffers) x.add_frees(id);
        x.set_mean_over(b.mean_over());  // dL/dloss over the global batch: gas x dp
      }
      from_s[k] = Size();
      out_.push_back(std::move(x));
      if (k == last_bwd[mb] && mb < m - 1)
        for (int i : z_.post[mb]) EmitD(i);
    }
    if (in_.tied) out_.push_back(*in_.tied);
    for (int i : z_.post[m - 1]) EmitD(i);
    return std::move(out_);
  }

 private:
  int Size() const { return static_cast<int>(out_.size()); }

  void EmitD(int i) {
    Ins x = d_[i];
    for (int& w : *x.mutable_wait_for()) w = from_d_.at(w);
    from_d_[i] = Size();
    out_.push_back(std::move(x));
  }

  // D's buffers and waits on the schedule's instruction: the per-micro-batch buffers are
  // allocated by the step's first LOAD / FORWARD (and freed by its last BACKWARD).
  void Attach(const Ins& d, bool acts, Ins* x) const {
    auto per_micro = [&](int id) { return in_.activation_buffers.count(id) > 0; };
    for (int id : d.reads()) x->add_reads(id);
    for (int id : d.writes()) x->add_writes(id);
    for (int id : d.allocs())
      if (!per_micro(id) || acts) x->add_allocs(id);
    for (int id : d.frees())
      if (!per_micro(id)) x->add_frees(id);
    for (int id : d.frees_before()) x->add_frees_before(id);
    for (int w : d.wait_for()) x->add_wait_for(from_d_.at(w));
  }

  const MergeInput& in_;
  const google::protobuf::RepeatedPtrField<Ins>& d_;
  ZeroStream z_;
  std::vector<int> from_d_;
  std::vector<Ins> out_;
};

struct Stages {
  std::vector<PipeStageGraph> graphs;
  PipeStreams streams;
};

StatusOr<Stages> PlanStreams(const Graph& graph, const Topology& topo, const PlanConfig& c) {
  Stages st;
  DS_ASSIGN_OR_RETURN(st.graphs, PipelineStageGraphs(graph, topo.pp, c));
  DS_ASSIGN_OR_RETURN(
      PipeOrders orders,
      BuildPipelineSchedule(c.pipe_schedule, topo.pp,
                            static_cast<int>(c.gradient_accumulation_steps), c.virtual_stages));
  std::vector<PipeBoundary> bounds;
  std::vector<int> nodes;
  const int64_t tokens = c.micro_batch_size * c.seq_len;
  for (size_t s = 0; s < st.graphs.size(); ++s) {
    nodes.push_back(static_cast<int>(st.graphs[s].graph.nodes.size()));
    if (s + 1 == st.graphs.size()) break;
    const PipeStageGraph &a = st.graphs[s], &b = st.graphs[s + 1];
    PipeBoundary bd{a.send, b.recv, a.send_grad, {}};
    for (int t : a.send) bd.count.push_back(tokens * a.graph.tensors[t].shape.back().size);
    bounds.push_back(std::move(bd));
  }
  DS_ASSIGN_OR_RETURN(st.streams, PipelineStreams(orders, bounds, nodes));
  return st;
}

// Parameter names both the first and the last stage read (tied embeddings).
std::vector<std::string> TiedNames(const std::vector<PipeStageGraph>& graphs) {
  std::set<std::string> first;
  for (int t : graphs.front().graph.Params()) first.insert(graphs.front().graph.tensors[t].name);
  std::vector<std::string> tied;
  for (int t : graphs.back().graph.Params())
    if (first.count(graphs.back().graph.tensors[t].name))
      tied.push_back(graphs.back().graph.tensors[t].name);
  return tied;
}

Ranges FlatOf(const proto::PlanModel& model, const std::vector<std::string>& names) {
  Ranges r;
  for (const proto::PlanParam& p : model.params())
    if (std::count(names.begin(), names.end(), p.name()))
      r.push_back({p.offset(), p.offset() + p.numel()});
  std::sort(r.begin(), r.end());
  return r;
}

Ins TiedReduce(const proto::Plan& stage, const Ranges& flat, const std::string& group) {
  Ins ins;
  ins.set_kind(Ins::TIED_GRAD_ALL_REDUCE);
  ins.set_micro_batch(-1);
  int64_t count = 0;
  for (auto [b, e] : flat) {
    proto::ParamRange* r = ins.add_ranges();
    r->set_offset(b);
    r->set_count(e - b);
    count += e - b;
  }
  proto::Collective* c = ins.mutable_collective();
  c->set_group(group);
  c->set_count(count);
  c->set_dtype(stage.settings().model_dtype());
  c->set_bucket(-1);
  c->set_staging_in(-1);
  c->set_staging_out(-1);
  c->set_placement(proto::HOST);
  return ins;
}

// The world's groups: each stage's dp group, the links of every dp column, the embedding groups
// (with tied parameters) and "world".
void AddGroups(const ParallelGrid& grid, bool tied, proto::Plan* plan) {
  auto add = [plan](const std::string& name, const std::string& kind, std::vector<int> ranks) {
    proto::ProcessGroup* g = plan->add_groups();
    g->set_name(name);
    g->set_kind(kind);
    for (int r : ranks) g->add_ranks(r);
  };
  const auto dps = grid.Groups(GroupKind::kDp);
  for (size_t i = 0; i < dps.size(); ++i) add("dp." + Str(i), "dp", dps[i]);
  for (int d = 0; d < grid.dp(); ++d)
    for (int s = 0; s + 1 < grid.pp(); ++s) {
      const int a = grid.RankOf({s, d, 0}), b = grid.RankOf({s + 1, d, 0});
      add(PipeLinkName(a, b), "pipe", {a, b});
      add(PipeLinkName(b, a), "pipe", {a, b});
    }
  if (tied)
    for (int d = 0; d < grid.dp(); ++d)
      add("embedding." + Str(d), "embedding",
          {grid.RankOf({0, d, 0}), grid.RankOf({grid.pp() - 1, d, 0})});
  std::vector<int> all(grid.world());
  for (int r = 0; r < grid.world(); ++r) all[r] = r;
  add(kWorldGroup, kWorldGroup, all);
}

// Group names from the stage's plan and pipeline ranks to the world's.
void RenameGroups(const ParallelGrid& grid, int s, int d, std::vector<Ins>* list) {
  for (Ins& in : *list) {
    if (!in.has_collective()) continue;
    proto::Collective* c = in.mutable_collective();
    if (in.kind() == Ins::SEND || in.kind() == Ins::RECV) {
      const int me = grid.RankOf({s, d, 0}), peer = grid.RankOf({c->peer(), d, 0});
      c->set_peer(peer);
      c->set_group(in.kind() == Ins::SEND ? PipeLinkName(me, peer) : PipeLinkName(peer, me));
    } else if (in.kind() == Ins::GRAD_NORM_REDUCE || in.kind() == Ins::OVERFLOW_REDUCE ||
               in.kind() == Ins::LOSS_REDUCE) {
      c->set_group(kWorldGroup);
      c->set_placement(proto::HOST);
    } else if (in.kind() != Ins::TIED_GRAD_ALL_REDUCE && !c->group().empty()) {
      c->set_group("dp." + Str(s));
    }
  }
}

}  // namespace

StatusOr<std::vector<PipeStageGraph>> PipelineStageGraphs(const Graph& graph, int pp,
                                                          const PlanConfig& c) {
  DS_ASSIGN_OR_RETURN(std::vector<PipelineStage> stages,
                      PartitionStages(graph, pp * c.virtual_stages, c.partition_method));
  return StageGraphs(graph, stages);
}

Graph PipelineRankGraph(const std::vector<PipeStageGraph>& stages, int pp, int rank) {
  std::vector<const Graph*> chunks;
  for (size_t s = rank; s < stages.size(); s += pp) chunks.push_back(&stages[s].graph);
  return RankChunksGraph(chunks);
}

StatusOr<proto::Plan> MakePipelinePlan(const Graph& graph, const Topology& topo,
                                       const PlanConfig& config) {
  DS_RETURN_IF_ERROR(CheckScope(topo, config));
  auto st = PlanStreams(graph, topo, config);
  if (!st.ok()) return st.status().WithPrefix("plan");
  const std::vector<std::string> tied = TiedNames(st->graphs);
  if (!tied.empty() && config.stage == 2)
    return NotYet("zero_optimization.stage 2 and parameters the first and last stage share (" +
                  tied.front() + ": tie_word_embeddings); use stage 0 or 1");
  DS_ASSIGN_OR_RETURN(ParallelGrid grid, ParallelGrid::Create(topo.world, topo.tp, topo.pp));
  PlanConfig sub = config;
  sub.pipeline = 1;
  sub.virtual_stages = 1;
  sub.whole_backward = true;
  const Topology stage_topo{topo.dp, topo.dp, 1, 1};
  std::vector<proto::Plan> stages;
  for (int s = 0; s < topo.pp; ++s) {
    auto p = MakePlan(PipelineRankGraph(st->graphs, topo.pp, s), stage_topo, sub);
    if (!p.ok()) return p.status().WithPrefix("pipeline stage " + Str(s));
    stages.push_back(std::move(p).value());
  }
  proto::Plan plan = stages[0];
  plan.clear_ranks();
  plan.clear_groups();
  *plan.mutable_topology() = proto::PlanTopology();
  plan.mutable_topology()->set_world(topo.world);
  plan.mutable_topology()->set_dp(topo.dp);
  plan.mutable_topology()->set_tp(topo.tp);
  plan.mutable_topology()->set_pp(topo.pp);
  AddGroups(grid, !tied.empty(), &plan);
  const int m = static_cast<int>(config.gradient_accumulation_steps);
  for (int s = 0; s < topo.pp; ++s) {
    proto::StageLayout* layout = plan.add_stages();
    *layout->mutable_model() = stages[s].model();
    *layout->mutable_partition() = stages[s].partition();
    *layout->mutable_buckets() = stages[s].buckets();
    *layout->mutable_buffers() = stages[s].buffers();
    for (int slots : st->streams.slots[s]) layout->add_slots(slots);
    MergeInput in;
    in.pipe = &st->streams.ranks[s];
    // One executor per chunk and slot: each activation buffer counts the most slots a chunk
    // keeps (exact with one chunk, an upper bound with several).
    const int slots = *std::max_element(st->streams.slots[s].begin(), st->streams.slots[s].end());
    for (proto::PlanBuffer& b : *layout->mutable_buffers())
      if (b.kind() == proto::PlanBuffer::ACTIVATIONS) {
        b.set_bytes(b.bytes() * slots);
        if (!b.whole_step()) in.activation_buffers.insert(b.id());
      }
    const bool ends = s == 0 || s == topo.pp - 1;
    const Ranges tied_flat = FlatOf(stages[s].model(), tied);
    for (int d = 0; d < topo.dp; ++d) {
      in.zero = &stages[s].ranks(d);
      const Ins reduce = TiedReduce(stages[s], tied_flat, "embedding." + Str(d));
      in.tied = ends && !tied.empty() ? &reduce : nullptr;
      auto merged = Merger(in).Run(m);
      if (!merged.ok()) return merged.status().WithPrefix("pipeline stage " + Str(s));
      RenameGroups(grid, s, d, &*merged);
      if (s == topo.pp - 1 && s > 0 && !tied.empty())  // the first stage counts them
        for (Ins& x : *merged)
          if (x.kind() == Ins::GRAD_NORM_REDUCE) LeaveOutOfNorm(stages[s], d, tied_flat, &x);
      proto::RankPlan* rp = plan.add_ranks();
      rp->set_rank(grid.RankOf({s, d, 0}));
      rp->set_stage(s);
      for (Ins& x : *merged) *rp->add_instructions() = std::move(x);
    }
  }
  for (int w = 0; w < topo.world; ++w) {
    const proto::Plan view = RankView(plan, w);
    proto::RankPlan* rp = plan.mutable_ranks(w);
    DS_ASSIGN_OR_RETURN(*rp->mutable_memory(), WalkMemory(view, w));
  }
  plan.set_hash(PlanHash(plan));
  return plan;
}

}  // namespace ds::plan
