#include "runtime/base/logging.h"

#include <mutex>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace ds {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}

std::string Pattern(int rank) {
  if (rank < 0) return "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v";
  return "[%Y-%m-%d %H:%M:%S.%e] [r" + std::to_string(rank) + "] [%n] [%l] %v";
}

int g_rank = -1;
bool g_env_loaded = false;

}  // namespace

spdlog::logger* Logger(const char* subsystem) {
  std::lock_guard<std::mutex> lock(Mu());
  if (auto existing = spdlog::get(subsystem)) return existing.get();
  auto logger = spdlog::stderr_color_mt(subsystem);
  logger->set_pattern(Pattern(g_rank));
  if (!g_env_loaded) {
    g_env_loaded = true;
    spdlog::cfg::load_env_levels();
  }
  return logger.get();
}

void SetLogRank(int rank) {
  std::lock_guard<std::mutex> lock(Mu());
  g_rank = rank;
  spdlog::set_pattern(Pattern(rank));
}

void SetLogLevel(const std::string& level) {
  std::lock_guard<std::mutex> lock(Mu());
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace ds
