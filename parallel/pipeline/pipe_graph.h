// StageGraphs: the graph each pipeline stage runs (pipe_stages.h), cut out of the whole (or a
// tensor-parallel rank's) graph: the stage's nodes in order, keeping their original index as
// seed_id (so dropout draws the single rank's masks), the parameters they read, and
//
//   pipe_recv  first, one per activation the previous stage produced and this one reads (the
//              plan's RECV fills it; its gradient is what the stage sends back)
//   pipe_send  last, on every stage but the last: what the next stage reads, each with a
//              pipe_recv'd tensor for the gradient that comes back; its output is the stage's
//              loss (0), whose backward adds those gradients in
//   moe_loss   after them, on a stage with MoE layers: the stage's loss plus coeff x its own
//              layers' aux losses. The aux terms' gradient is the constant coeff, so each stage
//              backpropagates its own and none crosses a boundary; the step's loss reduction
//              adds the stages' terms (the plan's FORWARD of such a stage computes_loss, and its
//              LOSS_REDUCE is loss_part).
//
// so the executor runs a stage as it runs any graph. Each tensor that crosses a boundary must
// be read by the next stage only (a transformer's residual stream) and be [batch, seq, width]
// or, under sequence parallelism, a tp rank's [tokens / tp, width] chunk (pipe_recv's chunks:
// each tp rank sends its chunk to the same tp rank of the next stage); anything else is refused
// naming the tensor.
//
//   DS_ASSIGN_OR_RETURN(std::vector<PipeStageGraph> s, StageGraphs(graph, stages, {micro, seq}));
#pragma once

#include <vector>

#include "parallel/pipeline/pipe_stages.h"
#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/plan_config.h"

namespace ds::parallel {

struct PipeStageGraph {
  Graph graph;
  // In the whole graph's tensor order, and so the same order on both sides of a boundary:
  std::vector<int> recv;       // local activations the previous stage sends (pipe_recv outputs)
  std::vector<int> send;       // local activations the next stage reads
  std::vector<int> send_grad;  // per send: the local tensor its gradient is received into
  std::vector<int64_t> send_count;  // per send: its values per micro-batch (at TokenShape)
  std::vector<int> whole;           // per local tensor: its index in the whole graph, -1 if new
  int node_begin = 0;               // the stage's nodes [node_begin, node_end) of the whole graph
  int node_end = 0;
};

// A micro-batch's tokens: what sizes the boundary messages (send_count) and sequence
// parallelism's token chunks, whose shapes the graph leaves to inference.
struct TokenShape {
  int64_t batch = 1;
  int64_t seq = 1;
};

// One per stage (PartitionStages' contiguous node ranges, in order).
StatusOr<std::vector<PipeStageGraph>> StageGraphs(const Graph& graph,
                                                  const std::vector<PipelineStage>& stages,
                                                  const TokenShape& tokens);

// Tensor parallelism in a pipeline: the stage cut out of tp rank 0's graph `local` (`stage` is
// StageGraphs' of local.graph) with its parameters' boxes and the tp collectives that fall in
// its nodes, renumbered to the stage graph, so the stage is planned as any tp rank's graph is.
// InvalidArgument naming the tensor when a collective's tensor is not the stage's.
StatusOr<TpLocalGraph> StageTpLocal(const TpLocalGraph& local, const PipeStageGraph& stage);

// The stage graphs a pipeline of `pp` ranks runs, in virtual-stage order (chunk c of rank r is
// c x pp + r): PartitionStages by config's partition_method, then StageGraphs. The planner and
// the trainer cut the model with this one function.
StatusOr<std::vector<PipeStageGraph>> PipelineStageGraphs(const Graph& graph, int pp,
                                                          const plan::PlanConfig& config);

// What pipeline rank `rank` lays its parameters out over and is planned on: its chunks' stage
// graphs in one (RankChunksGraph; the chunk's own graph without interleaving).
Graph PipelineRankGraph(const std::vector<PipeStageGraph>& stages, int pp, int rank);

}  // namespace ds::parallel
