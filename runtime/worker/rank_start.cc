#include "runtime/worker/rank_start.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "runtime/base/logging.h"
#include "runtime/plan/plan_hash.h"
#include "runtime/worker/copy_stores.h"

namespace ds::worker {
namespace {

std::string StrEnv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

Status CheckPlanHash(const Trainer& trainer, int rank, int world) {
  const char* list = std::getenv("DS_PLAN_HASHES");
  std::string want = list ? "" : StrEnv("DS_PLAN_HASH");
  if (list) {
    const std::string entries = std::string(",") + list + ",";
    const std::string key = "," + std::to_string(world) + "=";
    const size_t at = entries.find(key);
    if (at == std::string::npos)
      return FailedPreconditionError("rank " + std::to_string(rank) + ": the launcher planned no " +
                                     "world of " + std::to_string(world) + " ranks (" + list + ")");
    const size_t begin = at + key.size();
    want = entries.substr(begin, entries.find(',', begin) - begin);
  }
  if (want.empty()) return OkStatus();
  std::string mine = plan::HashHex(trainer.plan().hash());
  if (mine == want) return OkStatus();
  return FailedPreconditionError("rank " + std::to_string(rank) + ": my step plan " + mine +
                                 " differs from the launcher's " + want +
                                 " (different binaries or config?)");
}

Status InitializeRank(Trainer* trainer, const RankEnv& env, const config::JobConfig& config) {
  if (env.memory_step < 0) return trainer->Initialize();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  Status restored;
  std::string from;
  if (env.memory_world > 0 && env.memory_world != env.world_size) {  // an elastic job shrank
    restored = trainer->RestoreResharded(env.memory_world, [&](int old_rank) {
      StatusOr<std::string> copy = FetchCopy(env, old_rank);
      if (copy.ok()) bytes += static_cast<int64_t>(copy->size());
      return copy;
    });
    from = std::to_string(env.memory_world) + " ranks' copies, cut for " +
           std::to_string(env.world_size);
  } else {
    StatusOr<std::string> copy = FetchCopy(env, env.rank);
    bytes = copy.ok() ? static_cast<int64_t>(copy->size()) : 0;
    restored = trainer->InitializeFromCopy(copy);
    from = "the copy in " + env.memory_source;
  }
  const double fetched_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (restored.ok()) {
    DS_LOG_INFO("memory",
                "rank {}: resumed from the in-memory copy of step {} ({:.1f} MiB: {}, in {:.2f} "
                "s; no disk read)",
                env.rank, env.memory_step, bytes / double(1 << 20), from, fetched_s);
    return OkStatus();
  }
  const std::string& dir = config.checkpoint.dir;
  DS_LOG_WARN("memory", "rank {}: the in-memory copies of step {} cannot be used ({}); resuming {}",
              env.rank, env.memory_step, restored.ToString(),
              dir.empty() ? std::string("from step 0 (no checkpoint.dir)")
                          : "from the latest checkpoint under " + dir);
  return trainer->Initialize();
}

}  // namespace ds::worker
