// The partition_activations pass of MakePlan (runtime/plan/plan_builder.cc), after the
// tensor-parallel pass:
// for each checkpoint a recompute segment keeps as 1/tp slices (RecomputeSegment::partitioned,
// runtime/graph/recompute.h), micro-batch by micro-batch,
//
//   CHECKPOINT_STASH    right after the forward node that writes it (the FORWARD range is cut
//                       there, and the stash follows any tp collective at that point): this
//                       rank's slice copied aside
//   CHECKPOINT_RESTORE  just before the segment's RECOMPUTE: the tp group's slices all-gathered
//                       back into the whole tensor
//   CHECKPOINT_RELOAD   instead, with cpu_checkpointing: the whole tensor copied back from host
//                       memory
//
// so the runner only dispatches. Pure and deterministic, like MakePlan.
#pragma once

#include <vector>

#include "proto/plan.pb.h"
#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/recompute.h"

namespace ds::parallel {

// `plan` holds the dp ranks' streams; `micro_batch` and `seq_len` size the all-gathers.
// InternalError when a checkpoint's forward or its segment's recompute is missing from some
// micro-batch.
Status InsertCheckpointPartition(const Graph& graph, const std::vector<RecomputeSegment>& segments,
                                 int64_t micro_batch, int64_t seq_len, proto::Plan* plan);

}  // namespace ds::parallel
