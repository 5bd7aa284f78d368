#include "runtime/planner/rank_cut.h"

#include <map>

#include "fmt/format.h"
#include "parallel/expert/ep_graph.h"
#include "parallel/pipeline/pipe_graph.h"
#include "parallel/sequence/ulysses_graph.h"
#include "runtime/base/status_macros.h"
#include "runtime/plan/parallel_grid.h"

namespace ds::planner {
namespace {

// Tensor parallelism, or experts split inside a pipeline (the stages are cut out of a
// TpLocalGraph, which carries the experts' boxes and all-to-alls).
bool TensorCut(const proto::RankCut& c) { return c.tp() > 1 || (c.ep() > 1 && c.pp() > 1); }

Status CutTensor(const proto::RankCut& c, const plan::PlanConfig& config, RankGraph* g) {
  DS_ASSIGN_OR_RETURN(
      parallel::TpLocalGraph local,
      parallel::TensorParallelGraph(g->whole, c.tp(), c.tp_rank(), config.sequence_parallel));
  // Expert parallelism beside it: this ep rank's experts, each tp rank routing its share of the
  // tokens (ep_graph.h).
  DS_RETURN_IF_ERROR(
      parallel::ApplyExpertParallel(c.ep(), c.ep_rank(), &local, c.tp(), c.tp_rank()));
  g->tp = std::make_unique<parallel::TpLocalGraph>(std::move(local));
  g->graph = g->tp->graph;
  g->sliced = g->tp.get();
  return OkStatus();
}

// Expert parallelism or Ulysses at tp 1: this ep rank's experts, held and computed, or this sp
// rank's chunk of each sequence; the all-to-all nodes in place.
Status CutRank(const proto::RankCut& c, RankGraph* g) {
  DS_ASSIGN_OR_RETURN(parallel::TpLocalGraph local, parallel::TensorParallelGraph(g->whole, 1, 0));
  DS_RETURN_IF_ERROR(parallel::ApplyExpertParallel(c.ep(), c.ep_rank(), &local));
  DS_RETURN_IF_ERROR(parallel::ApplyUlysses(c.sp(), c.sp_rank(), &local));
  g->local = std::make_unique<parallel::TpLocalGraph>(std::move(local));
  g->graph = g->local->graph;
  if (c.ep() > 1) g->sliced = g->local.get();  // its experts only
  return OkStatus();
}

// The pipeline's stages, cut out of the tp rank's graph when there is one; with tensor
// parallelism tp->shards are put in the stage's parameter order (tp->graph stays the rank's
// whole part: the checkpoint's shapes).
Status CutStages(const proto::RankCut& c, const plan::PlanConfig& config, RankGraph* g) {
  DS_ASSIGN_OR_RETURN(std::vector<parallel::PipeStageGraph> stages,
                      parallel::PipelineStageGraphs(g->graph, c.pp(), config));
  g->stage = c.stage();
  for (size_t s = c.stage(); g->tp && s < stages.size(); s += c.pp()) {
    DS_ASSIGN_OR_RETURN(g->chunk_tp.emplace_back(), parallel::StageTpLocal(*g->tp, stages[s]));
  }
  g->graph = parallel::PipelineRankGraph(stages, c.pp(), c.stage());  // all its chunks
  if (g->tp) {
    std::map<std::string, size_t> index;
    const std::vector<int> local = g->tp->graph.Params();
    for (size_t i = 0; i < local.size(); ++i) index[g->tp->graph.tensors[local[i]].name] = i;
    std::vector<parallel::TpParamShard> shards;
    for (int t : g->graph.Params())
      shards.push_back(g->tp->shards.at(index.at(g->graph.tensors[t].name)));
    g->tp->shards = std::move(shards);  // the initializer's slicer and the loader read them
  }
  for (size_t s = c.stage(); s < stages.size(); s += c.pp()) {
    g->io.push_back({stages[s].recv, stages[s].send});
    g->chunks.push_back(std::move(stages[s].graph));
  }
  return OkStatus();
}

std::string Experts(const RankGraph& g, const proto::RankCut& c) {
  const int64_t experts = parallel::NumExperts(g.whole);
  return fmt::format("expert parallel: rank {} is ep rank {} of {}: holds experts {}-{} of {}",
                     c.rank(), c.ep_rank(), c.ep(), c.ep_rank() * experts / c.ep(),
                     (c.ep_rank() + 1) * experts / c.ep() - 1, experts);
}

}  // namespace

StatusOr<proto::RankCut> RankCutOf(const plan::Topology& topo, const plan::PlanConfig& config,
                                   int rank) {
  DS_ASSIGN_OR_RETURN(plan::ParallelGrid grid,
                      plan::ParallelGrid::Create(topo.world, topo.tp, topo.pp, topo.ep, topo.sp));
  const plan::GridCoord at = grid.CoordOf(rank);
  proto::RankCut c;
  c.set_rank(rank);
  c.set_tp(topo.tp);
  c.set_tp_rank(at.tp);
  c.set_sequence_parallel(config.sequence_parallel);
  c.set_ep(topo.ep);
  c.set_ep_rank(grid.EpRankOf(rank));
  c.set_sp(topo.sp);
  c.set_sp_rank(grid.SpRankOf(rank));
  c.set_pp(topo.pp);
  c.set_stage(at.pp);
  c.set_dp(grid.dp());
  c.set_dp_rank(at.dp);
  c.set_data_rank(grid.DataRankOf(rank));
  return c;
}

Status AddRankCuts(const plan::Topology& topology, const plan::PlanConfig& config,
                   proto::Plan* plan) {
  for (int r = 0; r < plan->ranks_size(); ++r) {
    DS_ASSIGN_OR_RETURN(*plan->mutable_ranks(r)->mutable_cut(), RankCutOf(topology, config, r));
  }
  return OkStatus();
}

StatusOr<RankGraph> CutRankGraph(Graph whole, const proto::RankCut& cut,
                                 const plan::PlanConfig& config) {
  RankGraph g;
  g.cut = cut;
  g.whole = std::move(whole);
  g.graph = g.whole;
  if (TensorCut(cut))
    DS_RETURN_IF_ERROR(CutTensor(cut, config, &g));
  else if (cut.ep() > 1 || cut.sp() > 1)
    DS_RETURN_IF_ERROR(CutRank(cut, &g));
  if (cut.pp() > 1) DS_RETURN_IF_ERROR(CutStages(cut, config, &g));
  return g;
}

std::vector<std::string> DescribeRankCut(const RankGraph& g, const plan::PlanConfig& config) {
  const proto::RankCut& c = g.cut;
  std::vector<std::string> lines;
  if (c.tp() > 1)
    lines.push_back(fmt::format("tensor parallel: rank {} is tp rank {} of {}, dp rank {} of {}",
                                c.rank(), c.tp_rank(), c.tp(), c.dp_rank(), c.dp()));
  if (c.ep() > 1)
    lines.push_back(TensorCut(c)
                        ? Experts(g, c) + fmt::format(" and routes 1/{} of the tokens", c.tp())
                        : Experts(g, c));
  if (c.sp() > 1 && !TensorCut(c))
    lines.push_back(fmt::format(
        "ulysses: rank {} is sp rank {} of {}: its chunk of every sequence, data rank {} of {}",
        c.rank(), c.sp_rank(), c.sp(), c.data_rank(), c.dp() / c.sp()));
  if (c.pp() > 1) {
    int params = 0;
    for (const TensorInfo& t : g.graph.tensors) params += t.role == TensorRole::kParam;
    lines.push_back(fmt::format(
        "pipeline: rank {} runs stage {} of {} ({} chunk{}, {} nodes, {} parameter tensors), dp "
        "rank {} of {}, schedule {}",
        c.rank(), c.stage(), c.pp(), g.chunks.size(), g.chunks.size() == 1 ? "" : "s",
        g.graph.nodes.size(), params, c.dp_rank(), c.dp(),
        plan::PipeScheduleName(config.pipe_schedule)));
  }
  return lines;
}

}  // namespace ds::planner
