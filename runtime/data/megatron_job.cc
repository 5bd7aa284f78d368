#include "runtime/data/megatron_job.h"

#include <string>

namespace ds::data {

StatusOr<MegatronSamples::Options> MegatronSamplesFor(const config::JobConfig& c, int split_index,
                                                      int64_t seq_len, int64_t total_steps) {
  const std::string p = c.source + ": ";
  if (!c.data.megatron()) return FailedPreconditionError(p + "data.path is not set");
  if (c.train_batch_size <= 0)
    return FailedPreconditionError(p + "the batch sizes are not resolved");
  MegatronSamples::Options o;
  o.data_path = c.data.path;
  o.split = c.data.split;
  o.split_index = split_index;
  o.seq_len = seq_len;
  o.seed = static_cast<uint32_t>(c.data.seed);
  if (split_index == 1) {
    o.num_samples = c.monitor.eval_iters * c.train_batch_size;
    return o;
  }
  if (split_index != 0)
    return InvalidArgumentError(p + "split index " + std::to_string(split_index) +
                                ": 0 (train) or 1 (validation)");
  const int64_t needed = total_steps * c.train_batch_size;
  o.num_samples = c.data.train_samples > 0 ? c.data.train_samples : needed;
  if (o.num_samples <= 0)
    return InvalidArgumentError(p +
                                "data.path needs training.train_iters or data.train_samples (the "
                                "samples its datasets are built for)");
  if (o.num_samples < needed)
    return InvalidArgumentError(p + "data.train_samples " + std::to_string(o.num_samples) +
                                " is fewer than the " + std::to_string(needed) +
                                " samples train_iters x train_batch_size reads");
  return o;
}

}  // namespace ds::data
