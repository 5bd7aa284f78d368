// ds-data samples: the samples a Megatron-style job trains on, in order, as JSON lines of token
// ids (runtime/data/megatron_samples.h), so anyone can compare them with megatron-core's
// GPTDataset / BlendedDataset for the same prefixes, split, seed and sequence length.
//
//   ds-data samples --data-path 0.3 a_text_document 0.7 b_text_document --split 969,30,1
//       --seq-length 1024 --train-samples 100000 --count 10           (one command line)
//   ds-data samples --config job.yaml --count 200      # what that job's data.path trains on
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/megatron_samples.h"

namespace ds::tools {

struct SamplesOptions {
  data::MegatronSamples::Options data;
  // A job config instead of the flags above: its data.path, split, seed, seq_len and sample
  // count (runtime/data/megatron_job.h), its batch sizes resolved for `dp` data-parallel ranks.
  std::string config;
  int dp = 1;
  int64_t first = 0;  // the first sample printed
  int64_t count = 10;
};

// Prints samples [first, first + count) to stdout, one JSON array of ids per line.
Status RunSamples(const SamplesOptions& options);

}  // namespace ds::tools
