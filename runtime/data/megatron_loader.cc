#include "runtime/data/megatron_loader.h"

#include <limits>
#include <utility>

#include "runtime/base/status_macros.h"

namespace ds::data {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

StatusOr<std::unique_ptr<MegatronLoader>> MegatronLoader::Open(const Options& o) {
  const std::string p = o.name + ": ";
  if (o.batch < 1) return InvalidArgumentError(p + "batch size must be >= 1");
  if (o.seq < 1 || o.seq != o.samples.seq_len)
    return InvalidArgumentError(p + "seq_len " + Str(o.seq) + " must be >= 1 and equal the " +
                                "samples' " + Str(o.samples.seq_len));
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size)
    return InvalidArgumentError(p + "dp_rank " + Str(o.dp_rank) + " is not in [0, dp_size " +
                                Str(o.dp_size) + ")");
  StatusOr<MegatronSamples> samples = MegatronSamples::Open(o.samples);
  if (!samples.ok()) return samples.status().WithPrefix(o.name);
  const int64_t step = o.dp_size * o.batch;
  if (samples->size() < step)
    return InvalidArgumentError(p + Str(samples->size()) + " samples, fewer than one step's " +
                                Str(step) + " (dp_size x micro-batch)");
  return std::unique_ptr<MegatronLoader>(new MegatronLoader(o, std::move(samples).value()));
}

MegatronLoader::MegatronLoader(const Options& options, MegatronSamples samples)
    : options_(options), samples_(std::move(samples)) {}

Status MegatronLoader::SetState(const DataLoaderState& state) {
  if (state.epoch != 0 || state.position < 0 || state.position > samples_.size())
    return InvalidArgumentError(options_.name + ": loader state " + state.ToJson() +
                                " is outside these datasets (epoch 0, position at most the " +
                                Str(samples_.size()) + " samples built)");
  state_ = state;
  return OkStatus();
}

Status MegatronLoader::Next(int32_t* inputs, int32_t* targets) {
  const int64_t b = options_.batch, t = options_.seq;
  const int64_t first = state_.position + options_.dp_rank * b;
  if (state_.position + options_.dp_size * b > samples_.size())
    return OutOfRangeError(options_.name + ": the " + Str(samples_.size()) +
                           " samples built for this job are used up at sample " +
                           Str(state_.position) + " (raise data.train_samples)");
  for (int64_t i = 0; i < b; ++i) {
    DS_RETURN_IF_ERROR(samples_.Sample(first + i, &row_));
    for (int64_t j = 0; j <= t; ++j) {
      const int64_t id = row_[static_cast<size_t>(j)];
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        return DataLossError(options_.name + ": sample " + Str(first + i) + " holds token id " +
                             Str(id) + ", outside [0, 2^31)");
      if (j < t) inputs[i * t + j] = static_cast<int32_t>(id);
      if (j > 0) targets[i * t + j - 1] = static_cast<int32_t>(id);
    }
  }
  state_.position += options_.dp_size * b;
  return OkStatus();
}

}  // namespace ds::data
