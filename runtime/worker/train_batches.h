// TrainBatches: the Trainer's source of training micro-batches, what the step runner reads:
// it forwards to the data's loader (data.train's token file, data.path's Megatron datasets,
// data.sft's pairs) or
// to a source the caller set (Trainer::SetBatchSource: the RLHF steps' in-memory examples),
// and without either fails naming data.train. With packed documents' masks (data.reset_*,
// eod_mask_loss) it fills the graph's document starts / positions from each micro-batch's
// tokens and drops the loss at EOD inputs (runtime/data/document_masks.h); evaluation applies
// the same masks to its batches (ApplyMasks).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/data/batch_source.h"
#include "runtime/data/document_masks.h"

namespace ds::worker {

class TrainBatches final : public data::BatchSource {
 public:
  explicit TrainBatches(std::string job) : job_(std::move(job)) {}
  data::BatchSource* source = nullptr;
  // Packed documents: the options and the graph's kDocPositions / kDocStarts buffers
  // ([batch, seq] int32; null where the graph has none).
  data::DocumentMaskOptions masks;
  int64_t batch = 0, seq = 0;
  int32_t* positions = nullptr;
  int32_t* starts = nullptr;

  Status Next(int32_t* inputs, int32_t* targets) override {
    if (!source)
      return FailedPreconditionError(job_ +
                                     ": data.train is not set and no batch source was given");
    Status s = source->Next(inputs, targets);
    if (s.ok()) ApplyMasks(inputs, targets);
    return s;
  }

  void ApplyMasks(const int32_t* inputs, int32_t* targets) const {
    if (masks.any())
      data::ApplyDocumentMasks(masks, batch, seq, inputs, targets, positions, starts);
  }

 private:
  std::string job_;
};

}  // namespace ds::worker
