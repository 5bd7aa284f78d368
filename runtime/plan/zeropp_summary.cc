#include "runtime/plan/zeropp_summary.h"

#include <string>
#include <utility>
#include <vector>

#include "runtime/core/quantize.h"
#include "runtime/plan/plan_summary.h"

namespace ds::plan {

std::vector<StageSends> HierarchySends(const proto::Plan& plan, const proto::Instruction& ins) {
  std::vector<StageSends> out;
  const proto::Collective& c = ins.collective();
  if (c.hierarchy_size() == 0 || c.rank_counts_size() == 0) return out;
  const int64_t part =
      QuantizedBytes(c.rank_counts(0), QuantSpec{ins.quantize().bits(), ins.quantize().block()});
  int64_t parts = c.rank_counts_size();  // still to be split among the stages left
  for (const std::string& name : c.hierarchy()) {
    StageSends s;
    for (const proto::ProcessGroup& g : plan.groups())
      if (g.name() == name) s.members.assign(g.ranks().begin(), g.ranks().end());
    if (s.members.empty()) s.members = CollectiveMembers(plan, ins);  // a plan without groups
    parts /= static_cast<int64_t>(s.members.size());
    s.per_peer = parts * part;
    out.push_back(std::move(s));
  }
  return out;
}

std::string ZeroPlusPlusLine(const proto::PlanSettings& c) {
  std::vector<std::string> parts;
  if (c.hpz_partition_size() > 1)
    parts.push_back(
        "hpZ over " + std::to_string(c.hpz_partition_size()) +
        " consecutive dp ranks (a unit's later gathers from their secondary partition)");
  if (c.quantized_weights().bits() > 0)
    parts.push_back("qwZ int" + std::to_string(c.quantized_weights().bits()) +
                    " parameter gathers, one fp32 scale per " +
                    std::to_string(c.quantized_weights().block()) + " values");
  if (c.quantized_gradients().bits() > 0)
    parts.push_back("qgZ int" + std::to_string(c.quantized_gradients().bits()) +
                    " gradient all-to-alls, one fp32 scale per " +
                    std::to_string(c.quantized_gradients().block()) + " values" +
                    (c.qgz_local_size() > 1
                         ? ", inside runs of " + std::to_string(c.qgz_local_size()) +
                               " dp ranks (a node's), then across them"
                         : ""));
  if (parts.empty()) return "";
  std::string out = "ZeRO++: ";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out + "\n";
}

}  // namespace ds::plan
