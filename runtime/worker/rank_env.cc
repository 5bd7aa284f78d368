#include "runtime/worker/rank_env.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::worker {
namespace {

StatusOr<int> IntVar(const char* name, int dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30))
    return InvalidArgumentError(std::string("environment variable ") + name + "=\"" + v +
                                "\" is not a non-negative integer");
  return static_cast<int>(x);
}

std::string StrVar(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// "a,b,,c" -> {a, b, c}.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

StatusOr<RankEnv> ReadRankEnv() {
  RankEnv e;
  e.launched = std::getenv("RANK") != nullptr;
  DS_ASSIGN_OR_RETURN(e.rank, IntVar("RANK", 0));
  DS_ASSIGN_OR_RETURN(e.local_rank, IntVar("LOCAL_RANK", 0));
  DS_ASSIGN_OR_RETURN(e.world_size, IntVar("WORLD_SIZE", 1));
  DS_ASSIGN_OR_RETURN(e.local_size, IntVar("LOCAL_SIZE", 1));
  DS_ASSIGN_OR_RETURN(e.node_rank, IntVar("NODE_RANK", 0));
  DS_ASSIGN_OR_RETURN(e.round, IntVar("DS_ROUND", 0));
  e.resume = StrVar("DS_RESUME") == "1";
  e.coordinator = StrVar("DS_COORDINATOR");
  e.token_file = StrVar("DS_JOB_TOKEN_FILE");
  e.tls_ca = StrVar("DS_TLS_CA");
  e.tls_cert = StrVar("DS_TLS_CERT");
  e.tls_key = StrVar("DS_TLS_KEY");
  e.tls_server_name = StrVar("DS_TLS_SERVER_NAME");
  e.copy_dir = StrVar("DS_COPY_DIR");
  e.copy_stores = SplitList(StrVar("DS_COPY_STORES"));
  DS_ASSIGN_OR_RETURN(int memory_step, IntVar("DS_MEMORY_STEP", -1));
  e.memory_step = memory_step;
  e.memory_source = StrVar("DS_MEMORY_SOURCE");
  DS_ASSIGN_OR_RETURN(e.memory_world, IntVar("DS_MEMORY_WORLD", 0));
  e.memory_sources = SplitList(StrVar("DS_MEMORY_SOURCES"));
  if (e.memory_world > 0 && static_cast<int>(e.memory_sources.size()) != e.memory_world)
    return InvalidArgumentError("DS_MEMORY_SOURCES names " +
                                std::to_string(e.memory_sources.size()) + " stores for " +
                                "DS_MEMORY_WORLD=" + std::to_string(e.memory_world) + " ranks");
  const bool resharded = e.memory_world > 0 && e.memory_world != e.world_size;
  if (e.memory_step >= 0 && e.memory_source.empty() && !resharded)
    return InvalidArgumentError("DS_MEMORY_STEP=" + std::to_string(e.memory_step) +
                                " without DS_MEMORY_SOURCE (the store holding the copy)");
  if (e.world_size < 1 || e.rank >= e.world_size)
    return InvalidArgumentError("RANK=" + std::to_string(e.rank) +
                                " is outside WORLD_SIZE=" + std::to_string(e.world_size));
  if (e.local_size < 1 || e.local_rank >= e.local_size)
    return InvalidArgumentError("LOCAL_RANK=" + std::to_string(e.local_rank) +
                                " is outside LOCAL_SIZE=" + std::to_string(e.local_size));
  return e;
}

}  // namespace ds::worker
