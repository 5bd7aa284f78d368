// BatchSource: where a training step's micro-batches come from. The step runner asks for the
// next one at each LOAD_MICROBATCH: inputs and targets, [B, T] int32 each (row-major). A token
// file's DataLoader is one; the RLHF steps feed examples they built in memory (answer-only
// targets, reward pairs).
//
//   Status s = source->Next(executor->ids(), executor->targets());
#pragma once

#include <cstdint>

#include "runtime/base/status.h"

namespace ds::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills inputs[B*T] and targets[B*T] and advances.
  virtual Status Next(int32_t* inputs, int32_t* targets) = 0;
};

}  // namespace ds::data
