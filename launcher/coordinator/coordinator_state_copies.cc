// CoordinatorState's side of the in-memory copies (fault_tolerance.in_memory_interval): when a
// round closes, each member learns where its ranks send their copies and, after a failure, the
// step every rank resumes from and where each copy is (memory_copies.h decides).
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_state.h"
#include "launcher/coordinator/memory_copies.h"
#include "runtime/base/logging.h"

namespace ds::launcher {

void CoordinatorState::AssignCopiesLocked(int round, int world) {
  std::vector<std::string> addresses;
  for (const RoundMember& m : rendezvous_.members())
    addresses.push_back(nodes_[m.node_index].advertise_addr);
  const CopyPlacement copies = PlaceCopies(rendezvous_.members(), addresses, last_world_, world);
  last_world_ = world;
  if (!copies.summary.empty())
    DS_LOG_INFO("coord", "round {}: {}", round, copies.summary);
  else if (config_.memory_copies && round > 1)
    DS_LOG_INFO("coord",
                "round {}: no in-memory copy is held yet: the ranks resume from the disk "
                "checkpoint, or from step 0 without one",
                round);
  for (size_t i = 0; i < rendezvous_.members().size(); ++i) {
    NodeRecord& node = nodes_[rendezvous_.members()[i].node_index];
    JoinResult& r = node.result;
    r.copy_stores = copies.stores[i];
    r.memory_step = copies.step;
    r.memory_world = copies.copies_world;
    if (copies.step > 0 && copies.copies_world != world)  // every old rank's, to cut from
      r.memory_sources = copies.sources;
    else
      for (int rank : node.ranks)
        r.memory_sources.push_back(copies.step > 0 ? copies.sources[rank] : "");
  }
}

}  // namespace ds::launcher
