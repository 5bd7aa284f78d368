// The Megatron datasets' sample options a job's data.path reads: one function, so that the
// Trainer and `ds-data samples --config` build the same sample order.
//
//   DS_ASSIGN_OR_RETURN(MegatronSamples::Options o,
//                       MegatronSamplesFor(config, /*split_index=*/0, seq_len, total_steps));
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/config/job_config.h"
#include "runtime/data/megatron_samples.h"

namespace ds::data {

// split_index 0 (training): built for data.train_samples, by default total_steps x
// train_batch_size (Megatron's --train-iters x --global-batch-size); refused when
// data.train_samples is fewer than that. split_index 1 (validation): monitor.eval_iters x
// train_batch_size (one Megatron evaluation). Needs resolved batch sizes (ResolveBatchSizes).
StatusOr<MegatronSamples::Options> MegatronSamplesFor(const config::JobConfig& c, int split_index,
                                                      int64_t seq_len, int64_t total_steps);

}  // namespace ds::data
