// Pipeline stages: the graph's transformer blocks split into contiguous stages by DeepSpeed's
// partition_method (PipelineModule's), the embeddings (block -1) on the first stage and the
// final norm, head and loss (block num_blocks) on the last:
//
//   parameters  (DeepSpeed's default) balance the parameter count, the embeddings' and the
//               head's counted with the first and last stage
//   flops       balance the forward and backward FLOPs of one micro-batch (the OpDefs' counts at
//               micro_batch x seq_len), the embeddings' and the head's with the first and last
//               stage: what each stage computes, where parameters mislead (a tied head holds no
//               parameters of its own but costs more than a block when the vocabulary is large)
//   uniform     balance the number of transformer blocks
//   type:REGEX  balance the blocks with a node whose name or op matches REGEX (case-insensitive,
//               as DeepSpeed matches layer class names); each stage needs one
//
// "Balance" is DeepSpeed's partition_balanced: the largest stage as small as it can be, every
// stage at least one block; then the other stages as even as they can be (least sum of
// squares); among equal splits the later stages take the extra blocks (the first stages hold
// the most micro-batches in flight under 1F1B). With v virtual stages per
// rank there are p x v stages; stage s runs on pipeline rank s % p.
//
//   DS_ASSIGN_OR_RETURN(std::vector<PipelineStage> s, PartitionStages(graph, 4, "parameters"));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds::parallel {

struct PipelineStage {
  int first_block = 0;  // -1 on the first stage (the embeddings)
  int last_block = 0;   // num_blocks on the last (the head and loss)
  int node_begin = 0;   // nodes [node_begin, node_end)
  int node_end = 0;
  int64_t parameters = 0;  // elements of the parameters its nodes read
  int64_t weight = 0;      // what partition_method balanced
};

// InvalidArgument naming pipeline.partition_method and the numbers: fewer transformer blocks
// than stages, a method it does not know, a bad regex, a type: method that leaves a stage
// without a matching block. `seq_len` 0: the graph's max_seq_len (flops only). flops needs the
// op registry populated (link //kernels/ops:op_defs).
StatusOr<std::vector<PipelineStage>> PartitionStages(const Graph& graph, int stages,
                                                     const std::string& method,
                                                     int64_t micro_batch = 1, int64_t seq_len = 0);

// The forward and backward FLOPs of every node of `graph` for one micro-batch (the OpDefs'
// counts; seq_len 0: the graph's max_seq_len): what a pipeline stage computes per micro-batch.
StatusOr<double> GraphFlops(const Graph& graph, int64_t micro_batch, int64_t seq_len);

// "stage 0: embeddings + blocks 0-2, 12.3 M parameters" lines, for ds-launch plan.
std::string FormatStages(const std::vector<PipelineStage>& stages, int num_blocks);

}  // namespace ds::parallel
