#include "runtime/plan/memory_timeline.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::plan {
namespace {

using Kind = proto::PlanBuffer::Kind;

struct Live {
  std::map<Kind, int64_t> by_kind;
  int64_t total = 0;
  int64_t model_state = 0;

  void Add(const proto::PlanBuffer& b, int64_t sign) {
    by_kind[b.kind()] += sign * b.bytes();
    total += sign * b.bytes();
    if (IsModelState(b.kind())) model_state += sign * b.bytes();
  }
};

void FillKinds(const std::map<Kind, int64_t>& m,
               google::protobuf::RepeatedPtrField<proto::KindBytes>* out) {
  for (const auto& [kind, bytes] : m) {
    if (bytes == 0) continue;
    proto::KindBytes* k = out->Add();
    k->set_kind(kind);
    k->set_bytes(bytes);
  }
}

}  // namespace

bool IsModelState(Kind kind) {
  switch (kind) {
    case proto::PlanBuffer::PARAM_SHARD:
    case proto::PlanBuffer::PARAM_FULL:
    case proto::PlanBuffer::GRAD_FULL:
    case proto::PlanBuffer::GRAD_SHARD:
    case proto::PlanBuffer::OPTIMIZER_STATE:
    case proto::PlanBuffer::MASTER_WEIGHTS:
      return true;
    default:
      return false;
  }
}

StatusOr<proto::MemorySummary> WalkMemory(const proto::Plan& plan, int rank) {
  if (rank < 0 || rank >= plan.ranks_size())
    return InvalidArgumentError("memory timeline: no rank " + std::to_string(rank));
  const int n = plan.buffers_size();
  std::vector<bool> live(n, false);
  Live now;
  for (const proto::PlanBuffer& b : plan.buffers())
    if (b.whole_step() && !b.nvme()) {  // swap files are not memory
      live[b.id()] = true;
      now.Add(b, 1);
    }
  proto::MemorySummary summary;
  summary.set_peak_bytes(now.total);
  summary.set_peak_instruction(-1);
  std::map<Kind, int64_t> at_peak = now.by_kind, peak_by_kind = now.by_kind;
  int64_t model_state = now.model_state;
  const auto& list = plan.ranks(rank).instructions();
  auto bad = [&](int i, const std::string& what) {
    return InternalError("memory timeline: rank " + std::to_string(rank) + " instruction " +
                         std::to_string(i) + " " + what);
  };
  auto Free = [&](int i, int id) {
    if (id < 0 || id >= n) return bad(i, "frees unknown buffer " + std::to_string(id));
    if (!live[id] || plan.buffers(id).whole_step())
      return bad(i, "frees buffer " + plan.buffers(id).name() + " that is not live");
    live[id] = false;
    now.Add(plan.buffers(id), -1);
    return OkStatus();
  };
  for (int i = 0; i < list.size(); ++i) {
    for (int id : list[i].frees_before()) DS_RETURN_IF_ERROR(Free(i, id));
    for (int id : list[i].allocs()) {
      if (id < 0 || id >= n) return bad(i, "allocates unknown buffer " + std::to_string(id));
      if (live[id]) return bad(i, "allocates live buffer " + plan.buffers(id).name());
      live[id] = true;
      now.Add(plan.buffers(id), 1);
    }
    if (now.total > summary.peak_bytes()) {
      summary.set_peak_bytes(now.total);
      summary.set_peak_instruction(i);
      at_peak = now.by_kind;
    }
    for (const auto& [kind, bytes] : now.by_kind)
      peak_by_kind[kind] = std::max(peak_by_kind[kind], bytes);
    model_state = std::max(model_state, now.model_state);
    for (int id : list[i].frees()) DS_RETURN_IF_ERROR(Free(i, id));
  }
  for (const proto::PlanBuffer& b : plan.buffers())
    if (live[b.id()] && !b.whole_step())
      return InternalError("memory timeline: rank " + std::to_string(rank) + " ends with " +
                           b.name() + " live");
  FillKinds(at_peak, summary.mutable_at_peak());
  FillKinds(peak_by_kind, summary.mutable_peak_by_kind());
  summary.set_model_state_bytes(model_state);
  return summary;
}

}  // namespace ds::plan
