// StateMemory: the peak resident bytes of a rank's model states as the step runs (the runner
// samples after every instruction when StepParts::memory_profile is on, DS_MEMORY_PROFILE), by
// role, beside what the plan counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ds::zero {
class Optimizer;
class ParamStore;
}  // namespace ds::zero

namespace ds::worker {

class StateMemory {
 public:
  // Model states as the plan counts them: parameters (stage 3: shard and the `persistent` flat
  // ranges), gradients (full or shard), fp32 master and optimizer state. Gathered units,
  // unreduced gradient buckets and the collectives' staging are transient and reported apart.
  void Sample(const zero::ParamStore& params, const zero::Optimizer& optimizer,
              const std::vector<std::pair<int64_t, int64_t>>& persistent, int64_t staging_bytes);

  // "<device line>model states peak X MiB (role Y, ...), planned Z MiB".
  std::string Report(const std::string& device_line, int64_t planned_bytes) const;

 private:
  std::map<std::string, size_t> peak_by_role_;
  size_t peak_model_states_ = 0;
};

}  // namespace ds::worker
