// How an MoE model's routers spread tokens over their experts, counted from an executor's
// activations after a forward (every `<layer>routes` tensor, decoded with its dispatch buffer's
// rows per expert): the per-expert share of each layer and the share of routes capacity dropped.
// Task evaluation prints it so that a user sees every expert used (or not).
//
//   ExpertLoad load;
//   ... ex.Forward(0); load.Add(ex, rows);
//   std::printf("%s", load.Report().c_str());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"

namespace ds::worker {

class ExpertLoad {
 public:
  // Counts the routes of the first `rows` rows (sequences) of the executor's batch.
  void Add(const exec::Executor& ex, int64_t rows);
  // "eval: expert load h.0.mlp. 25.1% 24.9% ... of 5400 routes (0 dropped)\n" per layer;
  // empty for a dense model.
  std::string Report() const;

 private:
  struct Layer {
    std::string name;
    std::vector<int64_t> counts;
    int64_t dropped = 0;
  };
  std::vector<Layer> layers_;
};

}  // namespace ds::worker
