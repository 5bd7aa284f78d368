// TrainBatches: the Trainer's source of training micro-batches, what the step runner reads:
// it forwards to the token file's DataLoader (data.train) or to a source the caller set
// (Trainer::SetBatchSource: the RLHF steps' in-memory examples), and without either fails
// naming data.train.
#pragma once

#include <string>

#include "runtime/data/batch_source.h"

namespace ds::worker {

class TrainBatches final : public data::BatchSource {
 public:
  explicit TrainBatches(std::string job) : job_(std::move(job)) {}
  data::BatchSource* source = nullptr;

  Status Next(int32_t* inputs, int32_t* targets) override {
    if (!source)
      return FailedPreconditionError(job_ +
                                     ": data.train is not set and no batch source was given");
    return source->Next(inputs, targets);
  }

 private:
  std::string job_;
};

}  // namespace ds::worker
