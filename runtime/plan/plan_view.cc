#include "runtime/plan/plan_view.h"

namespace ds::plan {

int StageOf(const proto::Plan& plan, int rank) {
  for (const proto::RankPlan& r : plan.ranks())
    if (r.rank() == rank) return r.stage();
  return 0;
}

void SelectStage(int stage, proto::Plan* plan) {
  if (stage < 0 || stage >= plan->stages_size()) return;
  const proto::StageLayout& s = plan->stages(stage);
  *plan->mutable_model() = s.model();
  *plan->mutable_partition() = s.partition();
  *plan->mutable_buckets() = s.buckets();
  *plan->mutable_buffers() = s.buffers();
  *plan->mutable_swap() = s.swap();
}

proto::Plan RankView(const proto::Plan& plan, int rank) {
  proto::Plan view = plan;
  SelectStage(StageOf(plan, rank), &view);
  return view;
}

}  // namespace ds::plan
