// A compute instruction's node range and the blocks it spans: what the plan passes that cut
// FORWARD / RECOMPUTE / BACKWARD ranges (recompute, tensor parallelism, partition_activations)
// write on each piece.
#pragma once

#include "proto/plan.pb.h"
#include "runtime/graph/graph.h"

namespace ds::plan {

// Nodes [begin, end) of `graph`, and the blocks of the first and last of them.
inline void SetNodeRange(const Graph& graph, int begin, int end, proto::Instruction* ins) {
  ins->set_node_begin(begin);
  ins->set_node_end(end);
  ins->set_first_block(graph.nodes[begin].block);
  ins->set_last_block(graph.nodes[end - 1].block);
}

}  // namespace ds::plan
