// PipelineStreams: the compute and point-to-point part of one step on every pipeline rank, in
// the schedule's order (pipe_schedule.h): per forward of micro-batch i on chunk c,
//
//   RECV   the previous virtual stage's activations (not on the first), async
//   LOAD_MICROBATCH  on chunk 0 only: the rank reads each micro-batch once, in order, and its
//          later chunks' forwards use the same tokens
//   FORWARD  the chunk's whole stage graph, waiting for those RECVs
//   SEND   the activations the next virtual stage reads (not on the last), async
//
// and per backward the mirror: RECV of the gradients the next stage sends, BACKWARD, SEND of
// the gradients of what this stage received. Each RECV is then posted as early as its buffers
// allow (after the last BACKWARD of its slot, and after the RECV before it on its link), so its
// transfer overlaps the compute in between; the instruction that reads it waits for it. Every LOAD
// / FORWARD / BACKWARD / SEND / RECV names its chunk and activation slot (a slot is taken by a
// forward and freed by its backward; the slots a chunk needs are the micro-batches it has in
// flight). Each direction between two ranks is its own link group ("pipe.<a>-<b>": activations a ->
// b; gradients go back on "pipe.<b>-<a>"), so a blocked send holds up only its own link's queue. A
// forward waits for the send out of its slot before overwriting it, a backward likewise.
//
// SimulateStreams runs the streams with blocking semantics: each link group's queue runs its
// operations in order on each side, a SEND completes when the peer's RECV is at the head of its
// queue, and an instruction starts only after what it waits for completed. It ends exactly when
// the streams cannot deadlock and every message lands where its micro-batch is expected (the
// same micro-batch and size at both ends).
//
//   DS_ASSIGN_OR_RETURN(PipeStreams s, PipelineStreams(orders, links));
//   CHECK(SimulateStreams(s).finished);
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/pipe_schedule.h"
#include "proto/plan.pb.h"
#include "runtime/base/status.h"

namespace ds::parallel {

// What crosses the boundary from virtual stage s to s + 1 (s = chunk x p + rank): per tensor,
// its index in s's graph, its index in s + 1's graph, the tensor s's graph receives its
// gradient into (pipe_send's input), and its elements per micro-batch.
struct PipeBoundary {
  std::vector<int> send, recv, send_grad;
  std::vector<int64_t> count;
};

struct PipeStreams {
  std::vector<std::vector<proto::Instruction>> ranks;  // per pipeline rank
  std::vector<std::vector<int>> slots;                 // per pipeline rank, per chunk: slots needed
};

// `boundaries` has p x v - 1 entries, `stage_nodes` p x v (each virtual stage graph's node
// count: FORWARD / BACKWARD run all of it). BACKWARD's mean_over is m. zb-h1's split backward
// is BACKWARD_INPUT (with the gradients' SEND) and later BACKWARD_WEIGHT, which frees the slot.
// InvalidArgument for lists of the wrong length.
StatusOr<PipeStreams> PipelineStreams(const PipeOrders& orders,
                                      const std::vector<PipeBoundary>& boundaries,
                                      const std::vector<int>& stage_nodes);

// The link group of activations from pipeline rank `from` to `to`: "pipe.<from>-<to>".
std::string PipeLinkName(int from, int to);

struct StreamSimulation {
  bool finished = false;
  std::string stuck;  // which rank waits at which instruction, when not finished
};

StreamSimulation SimulateStreams(const PipeStreams& streams);

}  // namespace ds::parallel
