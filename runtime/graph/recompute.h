// Activation recompute (activation checkpointing): which node ranges a graph recomputes in
// backward and which of their activations are therefore not kept from forward. One rule, read
// by the planner (memory, RECOMPUTE instructions) and by the executor (memory layout), so the
// two agree by construction.
//
//   full       every transformer block (0 .. num_blocks - 1): only what crosses a block
//              boundary is kept (the residual stream at each block's input, Korthikanti et al.'s
//              2sbh); the block's forward runs again just before its backward (a pipeline
//              stage's pipe_recv / pipe_send nodes at a block's ends are left out: the plan's
//              RECVs write their tensors)
//   selective  the attention core of each block (Korthikanti et al.): the attention node's
//              output and saved statistics are recomputed just before the backward of the
//              node that reads its output (the output projection)
// and, whatever the mode but full (whose blocks contain them), each sp_gather of sequence
// parallelism: a column-parallel linear's input is kept as its token chunk and gathered
// again just before that linear's backward, as Megatron-SP does.
//
// partition_activations (DeepSpeed; Megatron's distribute_saved_activations): a segment input
// whose value is the same on every tensor-parallel rank (the residual stream entering a block
// under full recompute, without sequence parallelism) and that only the segment reads again is
// (with sequence parallelism: the embeddings' whole output, which block 0 splits into chunks)
// is not kept whole: each of the `parts` ranks keeps its 1/parts slice (flat elements
// [rank x n / parts, ...)), the whole tensor lives in the forward-only arena, and the slices are
// all-gathered back into it just before the segment's recompute.
//
// A segment's transient tensors are the activations its nodes produce whose every reader (the
// forward consumers and the backward reads, by OpDef::backward_reads_*) lies in
// [node_begin, point) and whose forward consumers run before the next segment starts; they,
// and the op-private saved buffers of the segment's nodes, share one arena across segments.
//
//   DS_ASSIGN_OR_RETURN(auto segments, RecomputeSegments(graph, RecomputeMode::kFull));
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds {

enum class RecomputeMode { kNone, kSelective, kFull };
// "none", "selective", "full"; ParseRecomputeMode accepts exactly those.
const char* RecomputeModeName(RecomputeMode mode);
bool ParseRecomputeMode(const std::string& text, RecomputeMode* mode);

struct RecomputeSegment {
  int node_begin = 0;
  int node_end = 0;  // exclusive
  // Backward reaches the segment's recompute after the backward of nodes [point, ...) ran:
  // the RECOMPUTE goes between them and node point - 1's backward.
  int point = 0;
  std::vector<int> transient;  // tensor indices (activations) not kept from forward
  // partition_activations: inputs kept as slices over `parts` ranks (PartitionCheckpoints).
  std::vector<int> partitioned;
  int parts = 1;
  bool on_host = false;  // cpu_checkpointing: the kept parts live in host memory
};

// The segments of `mode` in node order (none: only sequence parallelism's gathers). InvalidArgument
// naming the graph when selective recompute finds no attention node to recompute.
StatusOr<std::vector<RecomputeSegment>> RecomputeSegments(const Graph& graph, RecomputeMode mode);

// Marks, in each segment, the inputs partition_activations keeps as slices over `parts` ranks:
// activations `replicated` says are the same on every rank, produced before the segment, whose
// every forward and backward reader lies in the segment, and whose fixed dimensions' product
// `parts` divides. Returns how many were marked (0 when parts is 1).
int PartitionCheckpoints(const Graph& graph, const std::vector<bool>& replicated, int parts,
                         std::vector<RecomputeSegment>* segments);

// cpu_checkpointing on a device: the same inputs PartitionCheckpoints could split (a full
// recompute's block inputs that only the block reads), whole (parts 1), kept in host memory
// while the device holds them only from their forward to their segment's recompute. Returns
// how many were marked.
int OffloadCheckpoints(const Graph& graph, std::vector<RecomputeSegment>* segments);

// Per tensor: whether forward must keep it for backward: some node's backward reads it
// (OpDef::backward_reads_*) and recompute does not make it transient, or a recompute segment
// reads it from outside (its inputs, read again when it runs in backward), unless the segment
// keeps it partitioned (then only its slice is kept).
std::vector<bool> KeptTensors(const Graph& graph, const std::vector<RecomputeSegment>& segments);

// Training: the activations nothing reads again after forward (not kept, not transient, not the
// loss) share an arena, placed first-fit over their forward live ranges [producer, last
// consumer]. A partitioned input lives there too, its range stretched to its segment's last node,
// so that in backward nothing the segment's recompute writes lands on it once it is gathered
// back. `bytes` per tensor; offset -1 for the tensors not placed here.
struct ForwardOnlyPlacement {
  std::vector<int64_t> offset;
  int64_t bytes = 0;  // the arena
};
ForwardOnlyPlacement PlaceForwardOnly(const Graph& graph,
                                      const std::vector<RecomputeSegment>& segments,
                                      const std::vector<int64_t>& bytes);

// Exchange nodes (OpDef::exchange): a plan may post the collective that writes the output from
// input 0 and complete it nodes later, so both buffers must stay live over both their ranges.
// Widens the two tensors' [first, last] ranges (node or backward-step indices; -1: unplaced, left
// alone) to their union.
void WidenExchanges(const Graph& graph, std::vector<int>* first, std::vector<int>* last);

// Whether node `n` of `graph` lies in one of `segments` (its saved buffers are transient).
bool InSegment(const std::vector<RecomputeSegment>& segments, int n);

}  // namespace ds
