// Activation recompute (activation checkpointing): which node ranges a graph recomputes in
// backward and which of their activations are therefore not kept from forward. One rule, read
// by the planner (memory, RECOMPUTE instructions) and by the executor (memory layout), so the
// two agree by construction.
//
//   full       every transformer block (0 .. num_blocks - 1): only what crosses a block
//              boundary is kept (the residual stream at each block's input, Korthikanti et al.'s
//              2sbh); the block's forward runs again just before its backward
//   selective  the attention core of each block (Korthikanti et al.): the attention node's
//              output and saved statistics are recomputed just before the backward of the
//              node that reads its output (the output projection)
// and, whatever the mode but full (whose blocks contain them), each sp_gather of sequence
// parallelism: a column-parallel linear's input is kept as its token chunk and gathered
// again just before that linear's backward, as Megatron-SP does.
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
};

// The segments of `mode` in node order (none: only sequence parallelism's gathers). InvalidArgument
// naming the graph when selective recompute finds no attention node to recompute.
StatusOr<std::vector<RecomputeSegment>> RecomputeSegments(const Graph& graph, RecomputeMode mode);

// Per tensor: whether forward must keep it for backward: some node's backward reads it
// (OpDef::backward_reads_*) and recompute does not make it transient, or a recompute segment
// reads it from outside (its inputs, read again when it runs in backward).
std::vector<bool> KeptTensors(const Graph& graph, const std::vector<RecomputeSegment>& segments);

// Training: the activations nothing reads again after forward (not kept, not transient, not the
// loss) share an arena, placed first-fit over their forward live ranges [producer, last
// consumer]. `bytes` per tensor; offset -1 for the tensors not placed here.
struct ForwardOnlyPlacement {
  std::vector<int64_t> offset;
  int64_t bytes = 0;  // the arena
};
ForwardOnlyPlacement PlaceForwardOnly(const Graph& graph,
                                      const std::vector<RecomputeSegment>& segments,
                                      const std::vector<int64_t>& bytes);

// Whether node `n` of `graph` lies in one of `segments` (its saved buffers are transient).
bool InSegment(const std::vector<RecomputeSegment>& segments, int n);

}  // namespace ds
