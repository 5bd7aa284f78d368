// A launched rank's in-memory copies as its agents keep them (fault_tolerance.in_memory_interval):
// the copier that sends this rank's copies to the state stores DS_COPY_STORES names (its node's
// agent, then the next node's: launcher/state_store), and on a restart the copy of DS_MEMORY_STEP
// fetched from the store DS_MEMORY_SOURCE names. copy_stores.cc talks to the stores through the
// launcher's client, as ds-worker's main talks to the coordinator (a compose file of the layering).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/worker/memory_copier.h"
#include "runtime/worker/rank_env.h"

namespace ds::worker {

// Null when `interval` is 0, or (with a warning saying so) when the rank was not started by an
// agent that keeps copies.
std::unique_ptr<MemoryCopier> MakeCopier(const RankEnv& env, int64_t interval);

// Rank `rank`'s copy of env.memory_step, checked whole (size and CRC): this rank's from
// env.memory_source, or after a change of world size an old rank's from env.memory_sources.
StatusOr<std::string> FetchCopy(const RankEnv& env, int rank);

}  // namespace ds::worker
