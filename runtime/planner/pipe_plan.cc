#include "runtime/planner/pipe_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "parallel/expert/ep_graph.h"
#include "parallel/expert/moe_overlap.h"
#include "parallel/pipeline/pipe_merge.h"
#include "parallel/pipeline/pipe_streams.h"
#include "parallel/pipeline/rank_chunks.h"
#include "parallel/tensor/tp_graph.h"
#include "parallel/tensor/tp_plan.h"
#include "runtime/base/status_macros.h"
#include "runtime/plan/memory_timeline.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/plan/plan_view.h"
#include "runtime/planner/plan_builder.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

std::string Str(int64_t v) { return std::to_string(v); }

Status NotYet(const std::string& what) {
  return UnimplementedError("plan: parallel.pipeline with " + what + " is not planned yet");
}

Status CheckScope(const plan::Topology& topo, const plan::PlanConfig& c) {
  if (c.stage == 3) return NotYet("zero_optimization.stage 3");
  if (c.recompute != RecomputeMode::kNone && c.pipe_schedule == plan::PipeScheduleKind::kZbH1)
    return InvalidArgumentError(
        "plan: training.recompute " + std::string(RecomputeModeName(c.recompute)) +
        " with pipeline.schedule zb-h1: the weight half of each backward runs later and would "
        "need the recomputed activations kept until then, which is what recompute avoids; use "
        "schedule 1f1b or interleaved with recompute, or zb-h1 without it");
  if (c.states_on_device) return NotYet("the model states on the device (device.type cuda)");
  if (c.on_device)
    return NotYet(
        "device.type cuda: its sends and receives move host activations (Gloo); train "
        "on the CPU");
  return OkStatus();
}

struct Stages {
  std::vector<parallel::PipeStageGraph> graphs;
  parallel::PipeStreams streams;
};

StatusOr<Stages> PlanStreams(const Graph& graph, const plan::Topology& topo,
                             const plan::PlanConfig& c) {
  Stages st;
  DS_ASSIGN_OR_RETURN(st.graphs, parallel::PipelineStageGraphs(graph, topo.pp, c));
  DS_ASSIGN_OR_RETURN(parallel::PipeOrders orders,
                      parallel::BuildPipelineSchedule(
                          c.pipe_schedule, topo.pp, static_cast<int>(c.gradient_accumulation_steps),
                          c.virtual_stages));
  std::vector<parallel::PipeBoundary> bounds;
  std::vector<int> nodes;
  for (size_t s = 0; s < st.graphs.size(); ++s) {
    nodes.push_back(static_cast<int>(st.graphs[s].graph.nodes.size()));
    if (s + 1 == st.graphs.size()) break;
    const parallel::PipeStageGraph &a = st.graphs[s], &b = st.graphs[s + 1];
    parallel::PipeBoundary bd{a.send, b.recv, a.send_grad, a.send_count};
    bounds.push_back(std::move(bd));
  }
  DS_ASSIGN_OR_RETURN(st.streams, parallel::PipelineStreams(orders, bounds, nodes));
  // A stage adding its MoE layers' aux terms (pipe_graph.h) computes a part of the loss.
  for (int r = 0; r < topo.pp; ++r)
    for (Ins& in : st.streams.ranks[r]) {
      const parallel::PipeStageGraph& g = st.graphs.at(in.chunk() * topo.pp + r);
      if (in.kind() == Ins::FORWARD && g.graph.loss >= 0 && !g.graph.nodes.empty() &&
          g.graph.nodes.back().op == "moe_loss")
        in.set_computes_loss(true);
    }
  return st;
}

// Parameter names both the first and the last stage read (tied embeddings).
std::vector<std::string> TiedNames(const std::vector<parallel::PipeStageGraph>& graphs) {
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

// The tied gradients' sum over the first and last stage, for dp rank d of `stage`: each tied
// parameter's flat range (ZeRO 0-1: every rank holds the whole gradient) or the part of it the
// rank's shard holds (ZeRO-2), placed at its position in the tied parameters' whole gradient
// (names order, the same on both ends), so the runner all-reduces one buffer of that size over
// the embedding group: a pair of ranks, or at ZeRO-2 both stages' dp ranks (each adds the
// elements it owns; the others add zeros).
Ins TiedReduce(const proto::Plan& stage, const std::vector<std::string>& names, int d,
               const std::string& group) {
  Ins ins;
  ins.set_kind(Ins::TIED_GRAD_ALL_REDUCE);
  ins.set_micro_batch(-1);
  const bool shard = stage.settings().zero_stage() >= 2;
  ins.set_in_shard(shard);
  int64_t at = 0;
  for (const std::string& name : names) {
    const auto it = std::find_if(stage.model().params().begin(), stage.model().params().end(),
                                 [&name](const proto::PlanParam& p) { return p.name() == name; });
    if (it == stage.model().params().end()) continue;  // (TiedNames: both ends have them)
    const int64_t b = it->offset(), e = b + it->numel();
    auto add = [&ins](int64_t offset, int64_t count, int64_t pos) {
      proto::ParamRange* r = ins.add_ranges();
      r->set_offset(offset);
      r->set_count(count);
      r->set_at(pos);
    };
    if (!shard) add(b, e - b, at);
    for (const proto::PartitionUnit& u : stage.partition().units()) {
      if (!shard) break;
      const int64_t own = u.offset() + d * u.chunk();
      const int64_t lo = std::max(b, own),
                    hi = std::min({e, own + u.chunk(), u.offset() + u.count()});
      if (lo < hi) add(u.shard_offset() + lo - own, hi - lo, at + lo - b);
    }
    at += e - b;
  }
  proto::Collective* c = ins.mutable_collective();
  c->set_group(group);
  c->set_count(at);
  c->set_dtype(stage.settings().model_dtype());
  c->set_bucket(-1);
  c->set_staging_in(-1);
  c->set_staging_out(-1);
  c->set_placement(proto::HOST);
  return ins;
}

// The embedding group of the rank at `cell` of an end stage: per (dp, tp) cell a pair, or at
// ZeRO-2 per tp rank both stages' dp ranks.
std::string EmbeddingGroup(const plan::ParallelGrid& grid, int cell, bool sharded) {
  return "embedding." + Str(sharded ? cell % grid.tp() : cell);
}

// The world's groups: each stage's own (its dp, tp and kv groups, numbered on in the world's
// order), the links of every (dp, tp) column, their embedding groups (with tied parameters) and
// "world". Fills `names[s]`: stage s's group names to the world's.
void AddGroups(const plan::ParallelGrid& grid, const std::vector<proto::Plan>& stages, bool tied,
               bool sharded, bool interleaved,
               std::vector<std::map<std::string, std::string>>* names, proto::Plan* plan) {
  auto add = [plan](const std::string& name, const std::string& kind, std::vector<int> ranks) {
    proto::ProcessGroup* g = plan->add_groups();
    g->set_name(name);
    g->set_kind(kind);
    for (int r : ranks) g->add_ranks(r);
  };
  const int cell = grid.dp() * grid.tp();  // a stage's ranks: s x cell + its rank there
  names->assign(stages.size(), {});
  for (size_t s = 0; s < stages.size(); ++s) {
    std::map<std::string, int> count;  // per kind, the stage's groups
    for (const proto::ProcessGroup& g : stages[s].groups()) ++count[g.kind()];
    std::map<std::string, int> seen;
    (*names)[s][parallel::kWorldGroup] = parallel::kWorldGroup;
    for (const proto::ProcessGroup& g : stages[s].groups()) {
      if (g.kind() == parallel::kWorldGroup) continue;
      const std::string name = g.kind() + "." + Str(s * count[g.kind()] + seen[g.kind()]++);
      (*names)[s][g.name()] = name;
      std::vector<int> ranks;
      for (int r : g.ranks()) ranks.push_back(static_cast<int>(s) * cell + r);
      add(name, g.kind(), ranks);
    }
  }
  // Interleaved: a chunk's last virtual stage also hands on from the last rank to the first.
  const int links = interleaved && grid.pp() > 2 ? grid.pp() : grid.pp() - 1;
  for (int c = 0; c < cell; ++c)
    for (int s = 0; s < links; ++s) {
      const int a = s * cell + c, b = (s + 1) % grid.pp() * cell + c;
      add(parallel::PipeLinkName(a, b), "pipe", {std::min(a, b), std::max(a, b)});
      add(parallel::PipeLinkName(b, a), "pipe", {std::min(a, b), std::max(a, b)});
    }
  const int last = (grid.pp() - 1) * cell;
  for (int c = 0; tied && !sharded && c < cell; ++c)
    add(EmbeddingGroup(grid, c, false), "embedding", {c, last + c});
  for (int t = 0; tied && sharded && t < grid.tp(); ++t) {
    std::vector<int> ranks;
    for (int base : {0, last})
      for (int d = 0; d < grid.dp(); ++d) ranks.push_back(base + d * grid.tp() + t);
    add(EmbeddingGroup(grid, t, true), "embedding", ranks);
  }
  std::vector<int> all(grid.world());
  for (int r = 0; r < grid.world(); ++r) all[r] = r;
  add(parallel::kWorldGroup, parallel::kWorldGroup, all);
}

// Group names and ranks from the stage's plan and pipeline ranks to the world's, for the rank at
// `cell` (dp x tp position) of stage s.
void RenameGroups(const plan::ParallelGrid& grid, int s, int cell,
                  const std::map<std::string, std::string>& names, std::vector<Ins>* list) {
  const int cells = grid.dp() * grid.tp();
  for (Ins& in : *list) {
    if (!in.has_collective()) continue;
    proto::Collective* c = in.mutable_collective();
    if (in.kind() == Ins::SEND || in.kind() == Ins::RECV) {
      const int me = s * cells + cell, peer = c->peer() * cells + cell;
      c->set_peer(peer);
      c->set_group(in.kind() == Ins::SEND ? parallel::PipeLinkName(me, peer)
                                          : parallel::PipeLinkName(peer, me));
    } else if (in.kind() == Ins::GRAD_NORM_REDUCE || in.kind() == Ins::OVERFLOW_REDUCE ||
               in.kind() == Ins::LOSS_REDUCE) {
      c->set_group(parallel::kWorldGroup);
      c->set_placement(proto::HOST);
      // Before the last stage a rank's loss is at most a part: its MoE layers' aux terms.
      if (in.kind() == Ins::LOSS_REDUCE) in.set_loss_part(s + 1 < grid.pp());
    } else if (in.kind() != Ins::TIED_GRAD_ALL_REDUCE && !c->group().empty()) {
      c->set_group(names.at(c->group()));
    }
  }
}

struct StagePlans {
  std::vector<proto::Plan> plans;
  std::vector<parallel::RankChunks> chunks;  // per stage: its rank's chunks in one graph
};

// Stage s's chunks' graphs (virtual stages s, s + pp, ...).
std::vector<const Graph*> ChunksOf(const Stages& st, int pp, int s) {
  std::vector<const Graph*> chunks;
  for (size_t v = s; v < st.graphs.size(); v += pp) chunks.push_back(&st.graphs[v].graph);
  return chunks;
}

// Each stage planned as a model of its own over its dp x tp ranks, on its chunks in one graph:
// without tensor or expert parallelism through MakePlan, with them through PlanLocal on the
// chunks' parts of tp (and ep) rank 0's graph.
StatusOr<StagePlans> PlanStages(const parallel::TpLocalGraph& local, const Stages& st,
                                const plan::Topology& topo, const plan::PlanConfig& config) {
  plan::PlanConfig sub = config;
  sub.pipeline = 1;
  sub.expert = topo.ep;
  sub.virtual_stages = 1;
  sub.whole_backward = true;
  StagePlans out;
  size_t collectives = 0;
  for (int s = 0; s < topo.pp; ++s) {
    const parallel::RankChunks& rc =
        out.chunks.emplace_back(parallel::MapRankChunks(ChunksOf(st, topo.pp, s)));
    StatusOr<proto::Plan> p = InternalError("unplanned");
    if (topo.tp == 1 && topo.ep == 1) {
      p = MakePlan(rc.graph, {topo.dp, topo.dp, 1, 1}, sub);
    } else {
      std::vector<parallel::TpLocalGraph> parts;
      for (size_t v = s; v < st.graphs.size(); v += topo.pp) {
        DS_ASSIGN_OR_RETURN(parts.emplace_back(), parallel::StageTpLocal(local, st.graphs[v]));
        collectives += parts.back().collectives.size();
      }
      DS_ASSIGN_OR_RETURN(parallel::TpLocalGraph part, parallel::RankChunksTpLocal(parts, rc));
      p = PlanLocal(part, {topo.dp * topo.tp, topo.dp, topo.tp, 1, topo.ep}, sub);
    }
    if (!p.ok()) return p.status().WithPrefix("pipeline stage " + Str(s));
    out.plans.push_back(std::move(p).value());
  }
  if ((topo.tp > 1 || topo.ep > 1) && collectives != local.collectives.size())
    return InvalidArgumentError("plan: " + Str(local.collectives.size() - collectives) +
                                " tensor-parallel collective(s) fall on a pipeline stage boundary");
  return out;
}

}  // namespace

namespace {

// Stage s's layout in plan.stages and its ranks' merged streams in plan.ranks.
struct StageInputs {
  const plan::ParallelGrid* grid;
  const Stages* st;
  const std::vector<std::string>* tied;
  const std::map<std::string, std::string>* names;  // the stage's groups to the world's
  const parallel::RankChunks* chunks;               // what the stage plan was planned over
  int micro_batches = 1;
  int64_t micro_batch_size = 1, seq_len = 1;
};

Status AddStage(const StageInputs& x, int s, const proto::Plan& stage, proto::Plan* plan) {
  const plan::ParallelGrid& grid = *x.grid;
  proto::StageLayout* layout = plan->add_stages();
  *layout->mutable_model() = stage.model();
  *layout->mutable_partition() = stage.partition();
  *layout->mutable_buckets() = stage.buckets();
  *layout->mutable_buffers() = stage.buffers();
  *layout->mutable_swap() = stage.swap();
  const std::vector<int>& slots = x.st->streams.slots[s];
  for (int k : slots) layout->add_slots(k);
  for (size_t v = s; v < x.st->graphs.size(); v += grid.pp()) {  // the rank's chunks
    DS_ASSIGN_OR_RETURN(double f,
                        parallel::GraphFlops(x.st->graphs[v].graph, x.micro_batch_size, x.seq_len));
    layout->set_flops(layout->flops() + f);
  }
  parallel::StageStreams in;
  in.pipe = &x.st->streams.ranks[s];
  in.chunks = x.chunks;
  // One executor per chunk and slot: each activation buffer counts the most slots a chunk
  // keeps (exact with one chunk, an upper bound with several).
  const int most = *std::max_element(slots.begin(), slots.end());
  for (proto::PlanBuffer& b : *layout->mutable_buffers())
    if (b.kind() == proto::PlanBuffer::ACTIVATIONS ||
        b.kind() == proto::PlanBuffer::ACTIVATION_GRADS) {
      b.set_bytes(b.bytes() * most);
      if (!b.whole_step()) in.activation_buffers.insert(b.id());
    }
  const bool tied = !x.tied->empty(), ends = s == 0 || s == grid.pp() - 1;
  const Ranges tied_flat = FlatOf(stage.model(), *x.tied);
  const int cells = grid.dp() * grid.tp();
  for (int c = 0; c < cells; ++c) {  // the stage plan's rank c: dp c / tp, tp c % tp
    in.zero = &stage.ranks(c);
    const bool sharded = stage.settings().zero_stage() >= 2;
    const Ins reduce =
        ends && tied ? TiedReduce(stage, *x.tied, c / grid.tp(), EmbeddingGroup(grid, c, sharded))
                     : Ins();
    in.tied_after_reductions = sharded;
    in.tied = ends && tied ? &reduce : nullptr;
    auto merged = parallel::MergeStageStream(in, x.micro_batches);
    if (!merged.ok()) return merged.status().WithPrefix("pipeline stage " + Str(s));
    RenameGroups(grid, s, c, *x.names, &*merged);
    if (s == grid.pp() - 1 && s > 0 && tied)  // the first stage counts them
      for (Ins& ins : *merged)
        if (ins.kind() == Ins::GRAD_NORM_REDUCE)
          parallel::LeaveOutOfNorm(stage, c / grid.tp(), tied_flat, &ins);
    proto::RankPlan* rp = plan->add_ranks();
    rp->set_rank(s * cells + c);
    rp->set_stage(s);
    for (Ins& ins : *merged) *rp->add_instructions() = std::move(ins);
  }
  return OkStatus();
}

}  // namespace

StatusOr<proto::Plan> MakePipelinePlan(const Graph& graph, const plan::Topology& topo,
                                       const plan::PlanConfig& config) {
  DS_RETURN_IF_ERROR(CheckScope(topo, config));
  // Tensor parallelism: the stages are cut out of tp rank 0's graph (every tp rank's has the
  // same structure); at tp 1 that is the graph itself.
  auto local = parallel::TensorParallelGraph(graph, topo.tp, 0, config.sequence_parallel);
  if (!local.ok()) return local.status().WithPrefix("plan");
  // Expert parallelism: ep rank 0's experts (every ep rank's graph has the same shapes).
  DS_RETURN_IF_ERROR(
      parallel::ApplyExpertParallel(topo.ep, 0, &*local, topo.tp, 0).WithPrefix("plan"));
  if (!config.moe_overlap) parallel::CloseOverlapWindows(&*local);
  auto st = PlanStreams(local->graph, topo, config);
  if (!st.ok()) return st.status().WithPrefix("plan");
  const std::vector<std::string> tied = TiedNames(st->graphs);
  DS_ASSIGN_OR_RETURN(plan::ParallelGrid grid,
                      plan::ParallelGrid::Create(topo.world, topo.tp, topo.pp, topo.ep));
  DS_ASSIGN_OR_RETURN(StagePlans planned, PlanStages(*local, *st, topo, config));
  const std::vector<proto::Plan>& stages = planned.plans;
  proto::Plan plan = stages[0];
  plan.clear_ranks();
  plan.clear_groups();
  *plan.mutable_topology() = proto::PlanTopology();
  plan.mutable_topology()->set_world(topo.world);
  plan.mutable_topology()->set_dp(topo.dp);
  plan.mutable_topology()->set_tp(topo.tp);
  plan.mutable_topology()->set_pp(topo.pp);
  plan.mutable_topology()->set_ep(topo.ep);
  plan.mutable_settings()->set_pipe_schedule(plan::PipeScheduleName(config.pipe_schedule));
  plan.mutable_settings()->set_virtual_stages(config.virtual_stages);
  plan.mutable_settings()->set_partition_method(config.partition_method);
  std::vector<std::map<std::string, std::string>> names;
  AddGroups(grid, stages, !tied.empty(), config.stage >= 2, config.virtual_stages > 1, &names,
            &plan);
  for (int s = 0; s < topo.pp; ++s) {
    const StageInputs x{&grid,
                        &*st,
                        &tied,
                        &names[s],
                        &planned.chunks[s],
                        static_cast<int>(config.gradient_accumulation_steps),
                        config.micro_batch_size,
                        config.seq_len};
    DS_RETURN_IF_ERROR(AddStage(x, s, stages[s], &plan));
  }
  const int cells = topo.dp * topo.tp;  // a stage's ranks are s x cells .. (s + 1) x cells - 1
  for (int s = 0; s < topo.pp; ++s) {
    proto::Plan view = plan;  // one copy per stage, not per rank
    plan::SelectStage(s, &view);
    std::vector<proto::MemorySummary> memory;
    for (int w = s * cells; w < (s + 1) * cells; ++w) {
      DS_ASSIGN_OR_RETURN(proto::MemorySummary m, plan::WalkMemory(view, w));
      memory.push_back(std::move(m));
    }
    for (int c = 0; c < cells; ++c)
      *plan.mutable_ranks(s * cells + c)->mutable_memory() = std::move(memory[c]);
  }
  plan.set_hash(plan::PlanHash(plan));
  return plan;
}

}  // namespace ds::planner
