// StageGraphs: the graph each pipeline stage runs (pipeline_stages.h), cut out of the whole (or a
// tensor-parallel rank's) graph: the stage's nodes in order, keeping their original index as
// seed_id (so dropout draws the single rank's masks), the parameters they read, and
//
//   pipe_recv  first, one per activation the previous stage produced and this one reads (the
//              plan's RECV fills it; its gradient is what the stage sends back)
//   pipe_send  last, on every stage but the last: what the next stage reads, each with a
//              pipe_recv'd tensor for the gradient that comes back; its output is the stage's
//              loss (0), whose backward adds those gradients in
//
// so the executor runs a stage as it runs any graph. Each tensor that crosses a boundary must
// be read by the next stage only (a transformer's residual stream) and be [batch, seq, width];
// anything else is refused naming the tensor.
//
//   DS_ASSIGN_OR_RETURN(std::vector<PipeStageGraph> s, StageGraphs(graph, stages));
#pragma once

#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/plan/pipeline_stages.h"
#include "runtime/plan/tp_graph.h"

namespace ds::plan {

struct PipeStageGraph {
  Graph graph;
  // In the whole graph's tensor order, and so the same order on both sides of a boundary:
  std::vector<int> recv;       // local activations the previous stage sends (pipe_recv outputs)
  std::vector<int> send;       // local activations the next stage reads
  std::vector<int> send_grad;  // per send: the local tensor its gradient is received into
  std::vector<int> whole;      // per local tensor: its index in the whole graph, -1 if new
  int node_begin = 0;          // the stage's nodes [node_begin, node_end) of the whole graph
  int node_end = 0;
};

// One per stage (PartitionStages' contiguous node ranges, in order).
StatusOr<std::vector<PipeStageGraph>> StageGraphs(const Graph& graph,
                                                  const std::vector<PipelineStage>& stages);

// Tensor parallelism in a pipeline: the stage cut out of tp rank 0's graph `local` (`stage` is
// StageGraphs' of local.graph) with its parameters' boxes and the tp collectives that fall in
// its nodes, renumbered to the stage graph, so the stage is planned as any tp rank's graph is.
// InvalidArgument naming the tensor when a collective's tensor is not the stage's.
StatusOr<TpLocalGraph> StageTpLocal(const TpLocalGraph& local, const PipeStageGraph& stage);

}  // namespace ds::plan
