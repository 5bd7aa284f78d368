#include "runtime/worker/copy_stores.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "launcher/state_store/copy_client.h"
#include "launcher/state_store/copy_dir.h"
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

// Writes step's copy into this node's copy directory: a part file, its trailer, then the rename
// (the agent lists only complete copies); the rank's copies beyond the newest 2 are deleted.
StatusOr<std::string> KeepLocal(const std::string& dir, int rank, int64_t step,
                                const CopyFill& fill) {
  std::string part;
  DS_ASSIGN_OR_RETURN(int fd, launcher::OpenPartReusing(dir, rank, step, /*keep=*/2, &part));
  uint32_t crc = 0;
  Status written = fill(fd, &crc);
  if (written.ok()) written = launcher::WriteTrailer(fd, crc);
  ::close(fd);
  if (written.ok()) written = launcher::CommitPart(dir, part, rank, step, /*keep=*/2);
  if (!written.ok()) {
    ::unlink(part.c_str());
    return written;
  }
  return dir + "/" + launcher::CopyFileName(rank, step);
}

}  // namespace

std::unique_ptr<MemoryCopier> MakeCopier(const RankEnv& env, int64_t interval) {
  if (interval <= 0) return nullptr;
  if (!env.launched || env.copy_dir.empty()) {
    DS_LOG_WARN("memory",
                "fault_tolerance.in_memory_interval {}: copies are kept by the agents of a "
                "ds-launch job; this rank has none, so no copy is made",
                interval);
    return nullptr;
  }
  auto token = ReadToken(env);
  if (!token.ok()) {
    DS_LOG_WARN("memory", "rank {}: {}: no in-memory copy is made", env.rank,
                token.status().ToString());
    return nullptr;
  }
  CopySinks sinks;
  const std::string dir = env.copy_dir;
  const int rank = env.rank;
  sinks.keep_local = [dir, rank](int64_t step, const CopyFill& fill) {
    return KeepLocal(dir, rank, step, fill);
  };
  std::string list;
  for (const std::string& address : env.copy_stores) {
    auto client = std::make_shared<launcher::CopyClient>(address, *token);
    sinks.remote.push_back({address, [client, rank](int64_t step, const std::string& path) {
                              return client->PutFile(rank, step, path, kCopyTimeout);
                            }});
    list += ", " + address;
  }
  DS_LOG_INFO("memory", "rank {}: an in-memory copy every {} step(s), kept in {}{}", env.rank,
              interval, dir,
              list.empty() ? " (one node: no other copy)" : " and sent to" + list.substr(1));
  return std::make_unique<MemoryCopier>(env.rank, std::move(sinks));
}

StatusOr<std::string> FetchCopy(const RankEnv& env, int rank) {
  if (!env.copy_dir.empty()) {  // this node's agent holds it: no network
    const std::string local = env.copy_dir + "/" + launcher::CopyFileName(rank, env.memory_step);
    struct stat st {};
    if (::stat(local.c_str(), &st) == 0) return launcher::ReadCopyFile(local);
  }
  DS_ASSIGN_OR_RETURN(std::string token, ReadToken(env));
  const bool old_world = env.memory_world > 0 && env.memory_world != env.world_size;
  if (old_world && (rank < 0 || rank >= static_cast<int>(env.memory_sources.size())))
    return InvalidArgumentError("no store for old rank " + std::to_string(rank));
  launcher::CopyClient client(old_world ? env.memory_sources[rank] : env.memory_source, token);
  return client.Get(rank, env.memory_step, kCopyTimeout);
}

}  // namespace ds::worker
