// What ZeRO++ (zero/README.md Note [ZeRO++]) adds to the plan's summary: the settings line
// `ds-launch plan` prints, and the bytes qgZ's quantized reduce-scatter sends per all-to-all,
// which CollectiveSentBytes and the link-class split (link_bytes.h) count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace ds::plan {

// qgZ's quantized reduce-scatter (Collective.hierarchy): per all-to-all, its members and the
// bytes the rank sends each other member (the parts still to be split beyond that stage, as
// blocks). Empty for other instructions.
struct StageSends {
  std::vector<int> members;
  int64_t per_peer = 0;
};
std::vector<StageSends> HierarchySends(const proto::Plan& plan, const proto::Instruction& ins);

// "ZeRO++: hpZ over 2 ranks ...; qwZ ...; qgZ ...\n", or "" without ZeRO++.
std::string ZeroPlusPlusLine(const proto::PlanSettings& settings);

}  // namespace ds::plan
