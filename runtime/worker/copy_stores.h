// A launched rank's in-memory copies as its agents keep them (fault_tolerance.in_memory_interval):
// the copier that writes this rank's copies into its node's copy directory (DS_COPY_DIR, which
// its agent keeps in RAM) and sends them to the other nodes' agents DS_COPY_STORES names
// (launcher/state_store), and on a restart the copy of DS_MEMORY_STEP, read from the directory
// or fetched from the agent DS_MEMORY_SOURCE names. copy_stores.cc uses the launcher's copy
// files and client, as ds-worker's main uses the coordinator's (a compose file of the layering).
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

// Rank `rank`'s copy of env.memory_step, checked against its CRC: from this node's directory
// when it holds it, else this rank's from env.memory_source, or after a change of world size an
// old rank's from env.memory_sources.
StatusOr<std::string> FetchCopy(const RankEnv& env, int rank);

}  // namespace ds::worker
