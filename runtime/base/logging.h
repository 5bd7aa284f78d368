// Logging: one named spdlog logger per subsystem; the only header that includes spdlog.
//
//   DS_LOG_INFO("worker", "step {} loss {:.4f}", step, loss);
//
// Levels come from SPDLOG_LEVEL (e.g. "exec=debug") or SetLogLevel(). Workers log to
// stderr; the pattern carries the rank once it is known (SetLogRank).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ds {

// Returns the logger of `subsystem` (launch, agent, coord, worker, exec, comm, zero, io,
// kernels, ckpt, data, graph, tools), creating it on first use. Thread-safe.
spdlog::logger* Logger(const char* subsystem);
// Sets the rank shown in every line ("[r3]"); -1 hides it.
void SetLogRank(int rank);
// Sets the level of all loggers ("trace", "debug", "info", "warn", "error", "off").
void SetLogLevel(const std::string& level);

}  // namespace ds

#define DS_LOG_DEBUG(sub, ...) SPDLOG_LOGGER_DEBUG(::ds::Logger(sub), __VA_ARGS__)
#define DS_LOG_INFO(sub, ...) SPDLOG_LOGGER_INFO(::ds::Logger(sub), __VA_ARGS__)
#define DS_LOG_WARN(sub, ...) SPDLOG_LOGGER_WARN(::ds::Logger(sub), __VA_ARGS__)
#define DS_LOG_ERROR(sub, ...) SPDLOG_LOGGER_ERROR(::ds::Logger(sub), __VA_ARGS__)
