#include "runtime/planner/transfer_costs.h"

#include <algorithm>

#include "runtime/core/proto_dtype.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/plan/zeropp_summary.h"

namespace ds::planner {

using Ins = proto::Instruction;

double SwapSeconds(const proto::Plan& plan, const Ins& in, const HostRates& r) {
  const proto::SwapPlan& sw = plan.swap();
  const int64_t p16 = ProtoDTypeSize(plan.settings().model_dtype());
  int64_t bytes = 0;
  if (in.swap().sub_group() >= 0 && in.swap().sub_group() < sw.sub_groups_size()) {
    const proto::SubGroup& g = sw.sub_groups(in.swap().sub_group());
    bytes = g.stride() * sw.states() * 4;
    if (in.kind() == Ins::SWAP_OUT && sw.params()) bytes += g.count() * p16;
  } else {
    for (int u : in.units()) bytes += plan.partition().units(u).chunk() * p16;
  }
  const double gbps = in.kind() == Ins::SWAP_IN ? r.nvme_read_gbps : r.nvme_write_gbps;
  return bytes / (std::max(gbps, 1e-3) * 1e9);
}

namespace {

double Quantize(double values, const HostRates& r) {
  return values / (std::max(r.quantize_gvps, 1e-3) * 1e9);
}
double Dequantize(double values, const HostRates& r) {
  return values / (std::max(r.dequantize_gvps, 1e-3) * 1e9);
}

}  // namespace

double QuantizationSeconds(const proto::Plan& plan, const Ins& in, const HostRates& r) {
  if (in.quantize().bits() <= 0) return 0;
  if (in.kind() == Ins::GATHER_PARAMS || in.kind() == Ins::GATHER_SECONDARY) {
    const bool secondary = in.kind() == Ins::GATHER_SECONDARY;
    const int group =
        std::max(1, secondary ? plan.settings().hpz_partition_size()
                              : static_cast<int>(plan::CollectiveMembers(plan, in).size()));
    double own = 0;
    for (int u : in.units()) {
      const proto::PartitionUnit& unit = plan.partition().units(u);
      own += secondary ? unit.secondary_chunk() : unit.chunk();
    }
    return Quantize(own, r) + Dequantize(own * group, r);
  }
  double values = 0;
  for (const proto::ParamRange& range : in.ranges()) values += range.count();
  double seconds = 0;
  for (const plan::StageSends& stage : plan::HierarchySends(plan, in)) {
    const int p = std::max<int>(1, static_cast<int>(stage.members.size()));
    seconds += Quantize(values, r) + Dequantize(values, r);  // p parts out, p parts in
    values /= p;
  }
  return seconds;
}

}  // namespace ds::planner
