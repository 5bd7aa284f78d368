// Resource selection: which hosts and which of their slots a job runs on.
//
// The pipeline follows DeepSpeed's runner (reference deepspeed.md 1.4):
//   hostfile -> ApplyIncludeExclude(--include | --exclude) -> ApplyLimits(--num_nodes,
//   --num_slots). Every step keeps hostfile order, which is node rank order.
//
// --include / --exclude syntax (DeepSpeed's): '@'-separated host specs, each `host` (all of
// its slots) or `host:i,j,...` (those local slot indices), e.g. `worker-0:0,2@worker-1`.
// Differences from DeepSpeed, all deliberate: a host named twice merges its slots (DeepSpeed
// keeps the last spec for --include and fails on a repeated --exclude slot); a selection
// left with no host at all is an error here; limits also apply after include/exclude
// (DeepSpeed rejects --num_nodes/--num_gpus together with them).
// Pure functions, thread-safe.
//
//   DS_ASSIGN_OR_RETURN(auto sel, ApplyIncludeExclude(pool, flags.include, flags.exclude,
//                                                     hostfile_path));
//   DS_ASSIGN_OR_RETURN(sel, ApplyLimits(sel, flags.num_nodes, flags.num_slots));
#pragma once

#include <string>
#include <vector>

#include "launcher/hostfile.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct HostSelection {
  std::string host;           // as in the hostfile
  std::vector<int> slot_ids;  // local slot indices kept, ascending, unique, never empty
  int line = 0;               // hostfile line of the host (0 when not from a file)
};

// Filters `hosts` (ParseHostfile's output: unique names) by one of `include` / `exclude`;
// both empty selects every slot of every host. `source` names the hostfile in errors.
// InvalidArgument when:
//   - both include and exclude are non-empty (as DeepSpeed);
//   - a spec is empty (`a@@b`, leading/trailing '@'), has an empty host (`:0`), an empty
//     slot list (`a:`) or an empty or non-integer slot (`a:0,,1`, `a:x`);
//   - a host is not in the hostfile, or a slot index is outside [0, slots);
//   - nothing is left (every slot excluded, or the pool was empty).
// Hosts left with no slots are dropped; the rest keep hostfile order.
StatusOr<std::vector<HostSelection>> ApplyIncludeExclude(const std::vector<HostSlots>& hosts,
                                                         const std::string& include,
                                                         const std::string& exclude,
                                                         const std::string& source = "");

// Keeps the first `num_nodes` hosts, then the first `num_slots` slots of each kept host
// (the lowest kept indices); -1 keeps all. InvalidArgument when a limit is 0 or below -1,
// when num_nodes exceeds the hosts selected, or when num_slots exceeds the slots of any
// kept host (the message names it).
StatusOr<std::vector<HostSelection>> ApplyLimits(const std::vector<HostSelection>& selection,
                                                 int num_nodes, int num_slots);

}  // namespace ds::launcher
