// Each rank's part of the model: which tensor-parallel slice, experts, chunk of each sequence
// and pipeline stage it runs. The planner records it in the plan (RankPlan.cut, proto/plan.proto)
// when it makes the plan, and the worker builds its graph from that record with one call, so
// the cut is decided in one place and no worker code reasons about degrees.
//
//   DS_ASSIGN_OR_RETURN(proto::Plan plan, MakePlan(whole, topology, config));   // cuts inside
//   DS_ASSIGN_OR_RETURN(RankGraph mine, CutRankGraph(whole, plan.ranks(rank).cut(), config));
//   for (const std::string& line : DescribeRankCut(mine, config)) log(line);
//
// The cut applies the parallel/ rewrites in one order: tensor parallelism (with expert
// parallelism beside it, each tp rank routing its share of the tokens) when tp > 1 or experts
// are split inside a pipeline; the pipeline's stages cut out of that graph; expert parallelism
// or Ulysses on the whole graph otherwise.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"

namespace ds::planner {

// `rank`'s cut under `topology` (the grid's coordinates, as ExpandToGrid numbers the ranks).
StatusOr<proto::RankCut> RankCutOf(const plan::Topology& topology, const plan::PlanConfig& config,
                                   int rank);

// Sets RankPlan.cut of every rank of `plan` (plan.ranks(r) is world rank r's).
Status AddRankCuts(const plan::Topology& topology, const plan::PlanConfig& config,
                   proto::Plan* plan);

// What a rank builds its model states and executors over.
struct RankGraph {
  proto::RankCut cut;  // what it was cut by
  Graph whole;         // the model
  Graph graph;         // the rank's part: its parameter layout (a pipeline rank: all its chunks)
  // The tensor-parallel cut (tp > 1, or experts split inside a pipeline): the tp rank's graph
  // (its whole part, whose shapes a checkpoint holds), its parameters' boxes in `graph`'s
  // order, the collectives at its cut points.
  std::unique_ptr<parallel::TpLocalGraph> tp;
  // Expert parallelism or Ulysses at tp 1: the rank's graph and its all-to-alls.
  std::unique_ptr<parallel::TpLocalGraph> local;
  // The cut whose boxes this rank's parameters are of the whole ones (tp, or local with ep > 1);
  // null when the rank holds every parameter whole.
  const parallel::TpLocalGraph* sliced = nullptr;
  int stage = -1;             // a pipeline rank's stage, -1 without a pipeline
  std::vector<Graph> chunks;  // a pipeline rank's model chunks (graph: all of them)
  std::vector<std::pair<std::vector<int>, std::vector<int>>> io;  // per chunk: recv, send
  std::vector<parallel::TpLocalGraph> chunk_tp;  // per chunk with tensor parallelism: its cuts
};

// `whole` cut as `cut` says; `config` gives the pipeline's partition (partition_method,
// virtual_stages, the batch shape). Errors name the setting that cannot be cut.
StatusOr<RankGraph> CutRankGraph(Graph whole, const proto::RankCut& cut,
                                 const plan::PlanConfig& config);

// The log lines that say what the rank runs (one per kind of parallelism it takes part in).
std::vector<std::string> DescribeRankCut(const RankGraph& graph, const plan::PlanConfig& config);

}  // namespace ds::planner
