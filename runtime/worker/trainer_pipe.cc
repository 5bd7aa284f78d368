// The Trainer's pipeline-parallel part: the executors of its stage's activation slots under one
// PipelineCompute (the stage's graph is the plan's cut, runtime/planner/rank_cut.h).
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/pipe_compute.h"
#include "runtime/worker/train_batches.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {

Status Trainer::BuildPipelineCompute(const exec::ExecutorOptions& options) {
  if (part_->chunks.empty()) return OkStatus();  // no pipeline: the runner's executor computes
  const proto::StageLayout& layout = plan_->stages(part_->stage);
  if (layout.slots_size() != static_cast<int>(part_->chunks.size()))
    return InternalError("the plan gives stage " + std::to_string(part_->stage) + " " +
                         std::to_string(layout.slots_size()) + " model chunks; this rank has " +
                         std::to_string(part_->chunks.size()));
  // executor_ is chunk 0's first slot; each chunk's executors run its own graph over the one
  // parameter store of all the rank's chunks.
  std::vector<std::vector<exec::Executor*>> slots(part_->chunks.size());
  for (size_t c = 0; c < part_->chunks.size(); ++c) {
    exec::ExecutorOptions chunk = options;  // its own recompute segments
    DS_RETURN_IF_ERROR(SetRecompute(static_cast<int>(c), &chunk).status());
    for (int k = 0; k < layout.slots(static_cast<int>(c)); ++k) {
      if (c == 0 && k == 0) {
        slots[c].push_back(executor_.get());
        continue;
      }
      DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> e,
                          exec::Executor::Create(part_->chunks[c], params_.get(), chunk));
      slots[c].push_back(e.get());
      if (k == 0) micro_flops_ += e->forward_flops() + e->backward_flops();
      slot_executors_.push_back(std::move(e));
    }
  }
  pipe_compute_ = std::make_unique<PipelineCompute>(std::move(slots), batches_.get());
  return OkStatus();
}

}  // namespace ds::worker
