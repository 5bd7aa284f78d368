// MegatronLoader: a data-parallel rank's micro-batches from Megatron datasets (one prefix or a
// blend), in the order megatron-core's pretraining sampler gives them: sample indices run
// from the samples consumed so far upward, each group of dp_size x batch of them is one
// micro-batch of every rank, and rank r takes rows [r*batch, (r+1)*batch). A row's inputs are
// a sample's first seq tokens, its targets the last seq (samples are seq + 1 tokens).
//
//   MegatronLoader::Options o;
//   o.samples.data_path = {"0.3", "a", "0.7", "b"};  o.samples.num_samples = 200;
//   o.samples.seq_len = o.seq = 16;  o.batch = 2;  o.dp_rank = 1;  o.dp_size = 2;
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<MegatronLoader> l, MegatronLoader::Open(o));
//   DS_RETURN_IF_ERROR(l->Next(inputs, targets));
//
// The state's position is the samples consumed (epoch stays 0: the datasets are built for the
// job's whole run, epochs included), so resuming at any dp_size continues the same sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/megatron_samples.h"
#include "runtime/data/train_source.h"

namespace ds::data {

class MegatronLoader final : public TrainSource {
 public:
  struct Options {
    MegatronSamples::Options samples;  // its seq_len must equal seq
    int64_t batch = 1;                 // B: rows per micro-batch
    int64_t seq = 0;                   // T: tokens per row
    int dp_rank = 0;
    int dp_size = 1;
    std::string name = "data.path";  // how errors name the data
  };
  // Builds the sample order (every check of MegatronSamples::Open) and checks that one step's
  // dp_size x batch samples exist.
  static StatusOr<std::unique_ptr<MegatronLoader>> Open(const Options& options);

  // OutOfRange, naming the data, when the built samples are used up.
  Status Next(int32_t* inputs, int32_t* targets) override;
  DataLoaderState state() const override { return state_; }
  Status SetState(const DataLoaderState& state) override;
  void Reset() override { state_ = DataLoaderState(); }

  int64_t size() const { return samples_.size(); }
  const MegatronSamples& samples() const { return samples_; }

 private:
  MegatronLoader(const Options& options, MegatronSamples samples);

  const Options options_;
  const MegatronSamples samples_;
  DataLoaderState state_;
  std::vector<int64_t> row_;  // one sample's tokens
};

}  // namespace ds::data
