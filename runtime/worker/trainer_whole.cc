// The Trainer's parts as parts of the whole model: every rank's checkpoint slices of the whole
// parameters (tensor, expert and pipeline parallelism, ZeRO segments), and, for generation under
// expert parallelism, the whole model gathered over the ep group.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/expert/ep_graph.h"
#include "parallel/tensor/tp_graph.h"
#include "proto/plan.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/dtype.h"
#include "runtime/plan/parallel_grid.h"
#include "runtime/planner/rank_cut.h"
#include "runtime/worker/checkpoint_slices.h"
#include "runtime/worker/trainer.h"
#include "zero/shard_layout.h"

namespace ds::worker {

// Each element of every parameter is stored by exactly one rank (Note [Sharded checkpoints]):
// its ZeRO segments (stage 0: everything it holds, kept only on the first dp rank holding it, the
// experts' on the first of their edp group), as boxes of the whole parameters with tensor or
// expert parallelism, from its stage's layout under a pipeline.
StatusOr<std::vector<std::vector<OwnedSlice>>> Trainer::SliceLists(
    const std::vector<std::string>& states) const {
  const proto::PlanTopology& topo = plan_->topology();
  const int world = world_host_comm_->size();
  DS_ASSIGN_OR_RETURN(
      plan::ParallelGrid grid,
      plan::ParallelGrid::Create(world, std::max(1, topo.tp()), std::max(1, topo.pp()),
                                 std::max(1, topo.ep()), std::max(1, topo.sp())));
  // The boxes of every (tp rank, ep rank): tensor and expert parallelism.
  std::map<std::pair<int, int>, std::vector<parallel::TpParamShard>> shards;
  for (int t = 0; part_->sliced && t < std::max(1, topo.tp()); ++t)
    for (int e = 0; e < std::max(1, topo.ep()); ++e) {
      auto s = parallel::ExpertParallelShards(part_->whole, std::max(1, topo.ep()), e,
                                              std::max(1, topo.tp()), t);
      DS_RETURN_IF_ERROR(s.status());
      shards[{t, e}] = std::move(s).value();
    }
  // ToFullSlices finds a parameter's shard by its name's place in the whole graph's order.
  const Graph& whole = part_->sliced ? part_->whole : graph_;
  std::vector<zero::ParamSlot> whole_order;
  for (int t : whole.Params()) whole_order.push_back({whole.tensors[t].name});
  std::vector<std::vector<OwnedSlice>> all(world);
  if (part_->stage >= 0)
    all = PipelineSlices(*plan_, part_->tp ? part_->tp->graph : part_->whole, states);
  const bool copies = plan_->settings().zero_stage() == 0 && grid.dp() > 1;
  for (int k = 0; k < world; ++k) {
    if (part_->stage < 0)
      all[k] = SlicesOf(zero::LayoutFor(*plan_, k, params_->total_elements()).segments,
                        params_->slots(), states);
    if (part_->sliced) {
      const int tp_rank = grid.CoordOf(k).tp;
      all[k] = ToFullSlices(all[k], shards.at({tp_rank, grid.EpRankOf(k)}), whole_order, tp_rank);
    }
    if (!copies) continue;
    std::vector<OwnedSlice> first;
    for (OwnedSlice& o : all[k]) {
      const bool expert =
          whole.tensors[whole.FindTensor(o.desc.param)].sharding == ShardKind::kExpert &&
          topo.ep() > 1;
      if ((expert ? grid.EdpRankOf(k) : grid.CoordOf(k).dp) == 0) first.push_back(std::move(o));
    }
    all[k] = std::move(first);
  }
  return all;
}

// Expert parallelism: each rank holds its experts; generation runs the whole model on one rank,
// so every rank gathers the others' experts (an all-gather over the ep group per expert tensor:
// the ep ranks' slices are consecutive along the experts) into a store of the whole graph.
StatusOr<zero::ParamStore*> Trainer::GatherWholeModel() {
  const parallel::TpLocalGraph* local = part_->local.get();
  whole_params_ = std::make_unique<zero::ParamStore>(part_->whole, DType::kF32);
  std::vector<float> full(whole_params_->total_elements(), 0.0f), mine;
  for (size_t i = 0; i < params_->slots().size(); ++i) {
    const zero::ParamSlot& s = params_->slots()[i];
    const zero::ParamSlot* w = whole_params_->Find(s.name);
    if (w == nullptr) return InternalError("the whole model has no parameter " + s.name);
    mine.resize(s.numel);
    const Tensor model = params_->ModelView(s);
    for (int64_t j = 0; j < s.numel; ++j) mine[j] = LoadFloat(model.data(), model.dtype(), j);
    if (local->shards[i].boxes.front().shape == local->shards[i].full_shape) {
      std::memcpy(full.data() + w->offset, mine.data(), s.numel * sizeof(float));
      continue;
    }
    DS_RETURN_IF_ERROR(ep_comm_->AllGather(
        parallel::BufferView(mine.data(), s.numel),
        parallel::BufferView(full.data() + w->offset, s.numel * ep_comm_->size())));
  }
  whole_params_->SetFromFull(full.data());
  return whole_params_.get();
}

}  // namespace ds::worker
