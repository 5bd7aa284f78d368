// Where a round's in-memory copies go and which step a restart resumes from
// (fault_tolerance.in_memory_interval; the copies live in the agents' state stores,
// launcher/state_store, so they outlive the workers a restart stops).
//
// Every node's ranks keep their copies in their own agent's directory and send them to the next
// node's agent (node rank n+1, wrapping: its buddy): a lost worker takes its copy from its own
// node, a lost node's ranks from their buddy. When a round closes after a failure, the step to
// resume from is the newest step of which every rank of the new world has a complete copy in some
// member's store; a rank reads it from its own node's store when that holds it, else from another.
// When the world changed (an elastic job lost a node), the step must have a copy of every rank of
// the old world, and every new rank reads them all to cut its part (the sources are then per old
// rank). The copies of later steps belong to the abandoned timeline and are dropped by their
// agents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/coordinator/rendezvous.h"

namespace ds::launcher {

struct CopyPlacement {
  std::vector<std::vector<std::string>> stores;  // per member (members' order): its buddy's agent
  int64_t step = 0;                              // resume from this step's copies; 0: none
  int copies_world = 0;                          // the world the copies were made in
  std::vector<std::string> sources;              // per rank of that world, with step > 0
  std::string summary;                           // one line for the log: what and why
};

// `members` in node-rank order, as Rendezvous::members() gives them; `addresses[i]` the host
// members[i]'s agent is reached at; `old_world` the last round's world (0: none), `world` this
// round's.
CopyPlacement PlaceCopies(const std::vector<RoundMember>& members,
                          const std::vector<std::string>& addresses, int old_world, int world);

}  // namespace ds::launcher
