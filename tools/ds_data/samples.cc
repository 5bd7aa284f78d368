#include "tools/ds_data/samples.h"

#include <cstdio>
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/megatron_job.h"

namespace ds::tools {

namespace {

// The sample options of the job config's data.path, as the Trainer builds them.
StatusOr<data::MegatronSamples::Options> FromConfig(const SamplesOptions& o) {
  DS_ASSIGN_OR_RETURN(config::JobConfig c, config::LoadJobConfig(o.config));
  DS_RETURN_IF_ERROR(config::ResolveBatchSizes(&c, o.dp));
  const int64_t seq = c.data.seq_len > 0 ? c.data.seq_len : c.model.max_seq_len;
  if (seq <= 0) return InvalidArgumentError(o.config + ": data.seq_len is not set");
  const int64_t steps = c.train_iters > 0 ? c.train_iters : c.scheduler.total_num_steps;
  return data::MegatronSamplesFor(c, o.data.split_index, seq, steps);
}

}  // namespace

Status RunSamples(const SamplesOptions& o) {
  if (o.config.empty() == o.data.data_path.empty())
    return InvalidArgumentError("ds-data samples: give --config JOB or --data-path, not both");
  if (o.config.empty() && (o.data.seq_len < 1 || o.data.num_samples == 0))
    return InvalidArgumentError(
        "ds-data samples: --data-path needs --seq-length and --train-samples");
  data::MegatronSamples::Options options = o.data;
  if (!o.config.empty()) {
    DS_ASSIGN_OR_RETURN(options, FromConfig(o));
  }
  DS_ASSIGN_OR_RETURN(data::MegatronSamples samples, data::MegatronSamples::Open(options));
  if (o.first < 0 || o.count < 0 || o.first + o.count > samples.size())
    return OutOfRangeError("samples [" + std::to_string(o.first) + ", " +
                           std::to_string(o.first + o.count) + ") of " +
                           std::to_string(samples.size()));
  std::vector<int64_t> tokens;
  std::string line;
  for (int64_t k = o.first; k < o.first + o.count; ++k) {
    DS_RETURN_IF_ERROR(samples.Sample(k, &tokens));
    line = "[";
    for (size_t j = 0; j < tokens.size(); ++j) line += (j ? ", " : "") + std::to_string(tokens[j]);
    std::printf("%s]\n", line.c_str());
  }
  return OkStatus();
}

}  // namespace ds::tools
