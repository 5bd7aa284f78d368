// TrainSource: a BatchSource whose place in its stream can be saved and restored: the token
// file's DataLoader, the Megatron datasets' MegatronLoader, data.sft's SftLoader. The Trainer reads
// its training micro-batches from one, saves state() in every checkpoint and SetState()s it on
// resume, and Reset()s its validation source before each evaluation pass.
//
//   DS_RETURN_IF_ERROR(source->Next(inputs, targets));
//   std::string saved = source->state().ToJson();        // {"epoch": 0, "position": 4096}
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"
#include "runtime/data/batch_source.h"

namespace ds::data {

// Where a stream stands before the next step, the same on every data-parallel rank (so a
// state saved on rank 0 resumes every rank, at any dp_size). What position counts is the
// source's own: tokens or windows of a token file, samples consumed of a Megatron dataset,
// pairs of an SFT epoch's order.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t position = 0;

  // {"epoch": 3, "position": 4096}
  std::string ToJson() const;
  // InvalidArgument unless `json` is an object with integer epoch and position (>= 0).
  static StatusOr<DataLoaderState> FromJson(const std::string& json);
  bool operator==(const DataLoaderState& o) const {
    return epoch == o.epoch && position == o.position;
  }
};

class TrainSource : public BatchSource {
 public:
  virtual DataLoaderState state() const = 0;
  // InvalidArgument (naming the data) when the state lies outside this source's stream.
  virtual Status SetState(const DataLoaderState& state) = 0;
  // Back to the start of the stream (before each evaluation pass).
  virtual void Reset() = 0;
};

}  // namespace ds::data
