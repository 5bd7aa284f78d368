// TensorParallelGraph: the graph one tensor-parallel rank runs, partitioned from the full
// graph by the rule each op declares (kernels::TpRule, Megatron's rules, parallelism.md C):
//
//   column linear  replicated input -> output features split; the input's gradient is
//                  all-reduced in backward (Megatron's f)
//   row linear     split input -> partial sums, all-reduced in forward (Megatron's g); its bias
//                  moves to a bias_add after the all-reduce
//   heads          attention / rope on the rank's query heads and the key/value heads they read
//                  (split, or replicated when tp exceeds them: their gradients are then summed
//                  over the ranks sharing each, kv_share)
//   embedding      vocab-parallel lookup (vocab_start), all-reduced in forward
//   cross entropy  vocab-parallel: vocab_max, all-reduce (max), vocab_ce_stats, all-reduce
//                  (sum), vocab_ce_loss, which writes the logits' gradient itself
//   replicated / elementwise  norms run whole; elementwise ops follow their inputs
//   sequence parallel  (optional) norms, dropout and residuals on token chunks, all-gather
//                  before each column-parallel linear, reduce-scatter after each row-parallel
//
// The collectives are not nodes: they are cut points the planner turns into ACT_ALL_REDUCE
// instructions on the tp group between the FORWARD / BACKWARD node ranges (the runner only
// dispatches). Every rank's graph has the same structure and shapes; only vocab_start and
// the parameters' boxes (tp_shards.h) differ. Nodes keep their original index as seed_id,
// and dropout inside a split region adds the tp rank, so replicated regions draw the same
// masks at every tp degree.
//
//   DS_ASSIGN_OR_RETURN(TpLocalGraph local, TensorParallelGraph(graph, /*tp=*/2, /*rank=*/1));
//   ParamStore params(local.graph, ...);
#pragma once

#include <string>
#include <vector>

#include "parallel/tensor/tp_shards.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds::parallel {

// A collective over the tp group (or, expert parallelism, the ep group: ep_graph.h) at a cut of
// the local graph's node order.
struct TpCollective {
  enum Kind { kAllReduce, kAllGather, kReduceScatter, kAllToAll };
  Kind kind = kAllReduce;
  // Forward: after nodes [0, boundary) ran, before node `boundary`. Backward: after the
  // backward of nodes [boundary, end) ran, before node boundary - 1's.
  int boundary = 0;
  bool backward = false;  // true: on the tensors' gradients
  int tensor = -1;        // local graph tensor index (all-reduce: in place; else the source)
  int out = -1;           // all-gather / reduce-scatter: the destination tensor
  bool max = false;       // reduce with max (the vocab-parallel row max); else sum
  // The group it runs on: "tp", or "ep" (expert parallelism, ep_graph.h), "sp" (Ulysses,
  // ulysses_graph.h).
  std::string group = "tp";
  int capacity = -1;  // all-to-all: the tensor holding the rows per block a step moves
  // An overlap window (-1: none): the collective is posted at `boundary` and only needs to be
  // complete at `wait` (forward: before node `wait` runs, wait > boundary; backward: before the
  // backward of node wait - 1, wait < boundary); the nodes between run meanwhile. Whoever
  // ignores it runs the collective at `boundary`, which is always correct.
  int wait = -1;
};

// The two cuts of an all-to-all node at index `node` (an empty node whose output `out` the
// collective writes from `in`, expert parallelism and Ulysses): forward after the node ran, and in
// backward after its backward zeroed `in`'s gradient, the gradients the other way. `capacity`:
// the tensor holding the rows per block a step moves (-1: the whole tensor).
inline void AddAllToAllCuts(int node, int in, int out, const std::string& group, int capacity,
                            std::vector<TpCollective>* cuts) {
  TpCollective fwd;
  fwd.kind = TpCollective::kAllToAll;
  fwd.group = group;
  fwd.boundary = node + 1;
  fwd.tensor = in;
  fwd.out = out;
  fwd.capacity = capacity;
  TpCollective bwd = fwd;
  bwd.boundary = node;
  bwd.backward = true;
  bwd.tensor = out;
  bwd.out = in;
  cuts->push_back(fwd);
  cuts->push_back(bwd);
}

struct TpLocalGraph {
  Graph graph;
  std::vector<TpParamShard> shards;       // per parameter, in graph parameter order
  std::vector<TpCollective> collectives;  // forward ones by boundary, then backward ones
  // Sequence parallelism: parameters of nodes that run on token chunks (norms, row-parallel
  // biases), whose gradients are each rank's part of the sum, all-reduced over tp at the step's
  // end (graph tensor indices).
  std::vector<int> sp_params;
  // Key / value heads replicated over `kv_share` consecutive tp ranks (tp above n_kv_head):
  // each rank's gradient of them is its query heads' part, summed over those ranks (1: none).
  int kv_share = 1;
  // Per local tensor: an activation whose forward value is the same on every tp rank (norm
  // outputs, the residual stream, what a row-parallel all-reduce made whole): what
  // partition_activations may split into per-rank parts (runtime/graph/recompute.h).
  std::vector<bool> replicated;
  // Expert parallelism with tensor parallelism: each tp rank routes its chunk of the tokens, so
  // the MoE aux losses differ between tp ranks and the loss metric is averaged over every rank.
  bool aux_per_rank = false;
};

// InvalidArgument naming the node, op or model key when the graph cannot be partitioned (an
// op without a rule, a split input where a replicated one is needed, sizes tp does not
// divide). At tp 1 the graph comes back unchanged with no collectives.
// `sequence_parallel` (Megatron-SP): inside the transformer blocks and the final norm, norms,
// dropout and residuals run on each rank's chunk of the tokens; an all-gather (sp_gather)
// feeds each column-parallel linear and a reduce-scatter (sp_scatter) follows each
// row-parallel one, the embeddings' output entering the blocks through sp_split.
StatusOr<TpLocalGraph> TensorParallelGraph(const Graph& graph, int tp, int rank,
                                           bool sequence_parallel = false);

}  // namespace ds::parallel
