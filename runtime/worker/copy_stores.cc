#include "runtime/worker/copy_stores.h"

#include <chrono>
#include <fstream>
#include <utility>
#include <vector>

#include "launcher/state_store/state_store_client.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::worker {
namespace {

// A copy of a GPT-2-small rank is hundreds of MiB; loopback and real links move it in seconds.
constexpr std::chrono::milliseconds kCopyTimeout{120000};

StatusOr<std::string> ReadToken(const RankEnv& env) {
  std::ifstream in(env.token_file);
  std::string token;
  if (!std::getline(in, token) || token.empty())
    return FailedPreconditionError("no job token in " + env.token_file);
  return token;
}

}  // namespace

std::unique_ptr<MemoryCopier> MakeCopier(const RankEnv& env, int64_t interval) {
  if (interval <= 0) return nullptr;
  if (!env.launched || env.copy_stores.empty()) {
    DS_LOG_WARN("memory",
                "fault_tolerance.in_memory_interval {}: copies go to the agents of a ds-launch "
                "job; this rank has none, so no copy is made",
                interval);
    return nullptr;
  }
  auto token = ReadToken(env);
  if (!token.ok()) {
    DS_LOG_WARN("memory", "rank {}: {}: no in-memory copy is made", env.rank,
                token.status().ToString());
    return nullptr;
  }
  std::vector<CopyTarget> targets;
  for (const std::string& address : env.copy_stores) {
    auto client = std::make_shared<launcher::StateStoreClient>(address, *token);
    const int rank = env.rank;
    targets.push_back({address, [client, rank](int64_t step, const std::string& copy) {
                         return client->Put(rank, step, copy.data(), copy.size(), kCopyTimeout);
                       }});
  }
  DS_LOG_INFO("memory", "rank {}: an in-memory copy every {} step(s) to {}", env.rank, interval,
              [&] {
                std::string list;
                for (const std::string& a : env.copy_stores) list += (list.empty() ? "" : ", ") + a;
                return list;
              }());
  return std::make_unique<MemoryCopier>(env.rank, std::move(targets));
}

StatusOr<std::string> FetchCopy(const RankEnv& env, int rank) {
  DS_ASSIGN_OR_RETURN(std::string token, ReadToken(env));
  const bool old_world = env.memory_world > 0 && env.memory_world != env.world_size;
  if (old_world && (rank < 0 || rank >= static_cast<int>(env.memory_sources.size())))
    return InvalidArgumentError("no store for old rank " + std::to_string(rank));
  launcher::StateStoreClient client(old_world ? env.memory_sources[rank] : env.memory_source,
                                    token);
  return client.Get(rank, env.memory_step, kCopyTimeout);
}

}  // namespace ds::worker
