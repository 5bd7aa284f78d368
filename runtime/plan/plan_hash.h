// The plan hash workers compare with the coordinator's: FNV-1a 64 over the deterministic protobuf
// serialization of the plan with its `hash` field cleared.
#pragma once

#include <cstdint>
#include <string>

#include "proto/plan.pb.h"

namespace ds::plan {

uint64_t PlanHash(const proto::Plan& plan);
// 16 lower-case hex digits.
std::string HashHex(uint64_t hash);

}  // namespace ds::plan
