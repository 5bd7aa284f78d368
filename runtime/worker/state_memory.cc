#include "runtime/worker/state_memory.h"

#include <algorithm>
#include <cstdio>

#include "zero/optimizer.h"
#include "zero/param_store.h"

namespace ds::worker {

void StateMemory::Sample(const zero::ParamStore& params, const zero::Optimizer& optimizer,
                         const std::vector<std::pair<int64_t, int64_t>>& persistent,
                         int64_t staging_bytes) {
  size_t total = 0;
  auto add = [&](const std::string& role, size_t bytes, bool model_state) {
    peak_by_role_[role] = std::max(peak_by_role_[role], bytes);
    if (model_state) total += bytes;
  };
  for (const auto& [role, bytes] : params.ResidentBytes(persistent))
    add(role, bytes, role != "gathered" && role != "grad buckets");
  add("optimizer", optimizer.ResidentBytes(), true);
  add("comm staging", static_cast<size_t>(staging_bytes), false);
  peak_model_states_ = std::max(peak_model_states_, total);
}

std::string StateMemory::Report(const std::string& device_line, int64_t planned_bytes) const {
  auto mib = [](size_t b) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f", b / 1048576.0);
    return std::string(text);
  };
  std::string s = device_line;  // the host ParamStore: checkpoint copies
  s += "model states peak " + mib(peak_model_states_) + " MiB (";
  bool first = true;
  for (const auto& [role, bytes] : peak_by_role_) {
    s += (first ? "" : ", ") + role + " " + mib(bytes);
    first = false;
  }
  return s + "), planned " + mib(planned_bytes) + " MiB";
}

}  // namespace ds::worker
