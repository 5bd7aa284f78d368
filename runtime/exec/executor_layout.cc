// The executor's activation memory (Note [Activation layout]), apart from executor.cc: one
// arena placed by the rule the planner uses too (runtime/graph/recompute.h).
#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/executor_node.h"
#include "runtime/graph/recompute.h"

namespace ds::exec {
namespace {

using internal::AlignUp;

enum Part { kKept, kTransient, kForward };

// Where each tensor and saved buffer goes within its part.
struct Places {
  std::vector<Part> part;
  std::vector<size_t> at;                     // per tensor
  std::vector<std::vector<size_t>> saved_at;  // per node, per saved buffer
  std::vector<int> segment_of;                // per node: its recompute segment, -1 none
  size_t transient = 0;                       // the shared recompute arena
};

// The recompute segments' tensors and saved buffers, each segment from offset 0.
Places PlaceTransient(const std::vector<RecomputeSegment>& segments,
                      const std::vector<TensorSpec>& specs,
                      const std::vector<std::vector<TensorSpec>>& saved_specs) {
  Places p;
  p.part.assign(specs.size(), kKept);
  p.at.assign(specs.size(), 0);
  p.saved_at.resize(saved_specs.size());
  p.segment_of.assign(saved_specs.size(), -1);
  for (size_t s = 0; s < segments.size(); ++s) {
    size_t off = 0;
    for (int t : segments[s].transient) {
      p.part[t] = kTransient;
      p.at[t] = off;
      off += AlignUp(specs[t].nbytes());
    }
    for (int n = segments[s].node_begin; n < segments[s].node_end; ++n) {
      p.segment_of[n] = static_cast<int>(s);
      for (const TensorSpec& sp : saved_specs[n]) {
        p.saved_at[n].push_back(off);
        off += AlignUp(sp.nbytes());
      }
    }
    p.transient = std::max(p.transient, off);
  }
  return p;
}

}  // namespace

// Note [Activation layout]
// One arena in three parts. Kept (KeptTensors): what some backward or a recompute segment reads
// again, the saved buffers, and the slices of partitioned checkpoints, for the whole step.
// Transient (recompute, runtime/graph/recompute.h): each segment's recomputed tensors and its
// nodes' saved buffers, every segment from the same base (one segment is live at a time).
// Forward-only (training): tensors no backward reads, placed first-fit over their forward live
// ranges [producer, last consumer]. Inference keeps everything.
Status Executor::LayoutActivations(const std::vector<std::vector<TensorSpec>>& saved_specs,
                                   std::vector<std::vector<Tensor>>* saved_views) {
  const Graph& g = *graph_;
  const int nt = static_cast<int>(g.tensors.size()), nn = static_cast<int>(g.nodes.size());
  Places p = PlaceTransient(opt_.recompute, specs_, saved_specs);
  std::vector<Part>& part = p.part;
  std::vector<size_t>& at = p.at;
  std::vector<int64_t> aligned(nt, 0);
  for (int t = 0; t < nt; ++t) aligned[t] = static_cast<int64_t>(AlignUp(specs_[t].nbytes()));
  const ForwardOnlyPlacement fwd =
      opt_.training ? PlaceForwardOnly(g, opt_.recompute, aligned) : ForwardOnlyPlacement{};
  size_t kept = 0;
  const size_t transient = p.transient;
  for (int t = 0; t < nt; ++t) {
    if (g.tensors[t].role != TensorRole::kActivation || part[t] == kTransient) continue;
    if (!fwd.offset.empty() && fwd.offset[t] >= 0) {
      part[t] = kForward;
      at[t] = static_cast<size_t>(fwd.offset[t]);
      continue;
    }
    at[t] = kept;
    kept += AlignUp(specs_[t].nbytes());
  }
  for (int n = 0; n < nn; ++n)
    for (const TensorSpec& sp : saved_specs[n])
      if (p.segment_of[n] < 0) {
        p.saved_at[n].push_back(kept);
        kept += AlignUp(sp.nbytes());
      }
  std::map<int, std::pair<size_t, TensorSpec>> slices;  // partitioned input -> offset, spec
  size_t host = 0;  // cpu_checkpointing: offsets into host_slices_
  for (const RecomputeSegment& s : opt_.recompute)
    for (int t : s.partitioned) {
      const TensorSpec spec{{specs_[t].numel() / s.parts}, specs_[t].dtype};
      size_t& at_end = s.on_host ? host : kept;
      slices[t] = {at_end, spec};
      slice_on_host_[t] = s.on_host;
      at_end += AlignUp(spec.nbytes());
    }
  host_slices_.assign(host, 0);
  const size_t forward = static_cast<size_t>(fwd.bytes);
  act_bytes_ = static_cast<int64_t>(kept + transient + forward);
  kept_bytes_ = static_cast<int64_t>(kept);
  transient_bytes_ = static_cast<int64_t>(transient);
  DS_ASSIGN_OR_RETURN(char* base, Arena(std::max<size_t>(act_bytes_, 1), &act_arena_));
  const size_t base_of[] = {0, kept, kept + transient};
  for (int t = 0; t < nt; ++t)
    if (g.tensors[t].role == TensorRole::kActivation)
      views_[t] = Tensor(base + base_of[part[t]] + at[t], specs_[t].shape, specs_[t].dtype);
  for (const auto& [t, slice] : slices)
    slice_views_[t] = Tensor((slice_on_host_[t] ? host_slices_.data() : base) + slice.first,
                             slice.second.shape, slice.second.dtype);
  saved_views->assign(nn, {});
  for (int n = 0; n < nn; ++n)
    for (size_t k = 0; k < saved_specs[n].size(); ++k)
      (*saved_views)[n].push_back(
          Tensor(base + (p.segment_of[n] >= 0 ? kept : 0) + p.saved_at[n][k],
                 saved_specs[n][k].shape, saved_specs[n][k].dtype));
  return OkStatus();
}

Tensor Executor::CheckpointSlice(int tensor) const {
  auto it = slice_views_.find(tensor);
  return it == slice_views_.end() ? Tensor() : it->second;
}

Status Executor::StashCheckpoint(int tensor) {
  const Tensor slice = CheckpointSlice(tensor);
  if (!slice.defined())
    return InvalidArgumentError("the plan stashes tensor " + std::to_string(tensor) +
                                ", which no recompute segment partitions");
  const size_t bytes = slice.nbytes();
  const bool host = slice_on_host_.at(tensor);
  const char* from =
      static_cast<const char*>(views_[tensor].data()) + (host ? 0 : opt_.checkpoint_rank * bytes);
  if (device_)
    return host ? opt_.memory->CopyToHost(slice.data(), from, bytes)
                : opt_.memory->Copy(slice.data(), from, bytes);
  std::memcpy(slice.data(), from, bytes);
  return OkStatus();
}

Status Executor::RestoreCheckpoint(int tensor) {
  const Tensor slice = CheckpointSlice(tensor);
  if (!slice.defined() || !slice_on_host_.at(tensor))
    return InvalidArgumentError("the plan restores tensor " + std::to_string(tensor) +
                                " from host memory, where no recompute segment keeps it");
  if (device_)
    return opt_.memory->CopyToDevice(views_[tensor].data(), slice.data(), slice.nbytes());
  std::memcpy(views_[tensor].data(), slice.data(), slice.nbytes());
  return OkStatus();
}

}  // namespace ds::exec
