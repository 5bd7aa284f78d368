#include "runtime/data/data_loader.h"

#include <numeric>
#include <random>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/data/random.h"

namespace ds::data {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

Status CheckOptions(const DataLoaderOptions& o) {
  const std::string p = o.path + ": ";
  if (o.batch < 1) return InvalidArgumentError(p + "batch size must be >= 1");
  if (o.seq < 1) return InvalidArgumentError(p + "seq_len must be >= 1");
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    return InvalidArgumentError(p + "dp_rank " + Str(o.dp_rank) + " is not in [0, dp_size " +
                                Str(o.dp_size) + ")");
  }
  return OkStatus();
}

Status CheckSize(const DataLoaderOptions& o, const TokenFile& file) {
  const int64_t n = file.size();
  const std::string p = o.path + ": ";
  if (n < o.seq + 1) {
    return InvalidArgumentError(p + Str(n) + " tokens, fewer than seq_len + 1 = " + Str(o.seq + 1));
  }
  if (!o.shuffle) {
    const int64_t step = o.dp_size * o.batch * o.seq + 1;
    if (n < step) {
      return InvalidArgumentError(
          p + Str(n) + " tokens, fewer than the " + Str(step) +
          " one sequential step reads (dp_size x batch x seq_len + 1); use shuffle, a smaller "
          "batch or more data");
    }
  } else if ((n - 1) / o.seq > int64_t{UINT32_MAX}) {
    return InvalidArgumentError(p + "too many windows to shuffle; use a longer seq_len");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Open(const DataLoaderOptions& options) {
  DS_RETURN_IF_ERROR(CheckOptions(options));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> file,
                      TokenFile::Open(options.path, options.format));
  DS_RETURN_IF_ERROR(CheckSize(options, *file));
  return std::unique_ptr<DataLoader>(new DataLoader(options, std::move(file)));
}

DataLoader::DataLoader(const DataLoaderOptions& options, std::unique_ptr<TokenFile> file)
    : options_(options),
      file_(std::move(file)),
      num_windows_(options.shuffle ? (file_->size() - 1) / options.seq : 0) {}

int64_t DataLoader::steps_per_epoch() const {
  const int64_t rows = options_.dp_size * options_.batch;
  if (options_.shuffle) return num_windows_ / rows;
  return (file_->size() - 1) / (rows * options_.seq);
}

Status DataLoader::SetState(const DataLoaderState& state) {
  const int64_t limit = options_.shuffle ? num_windows_ : file_->size();
  if (state.epoch < 0 || state.position < 0 || state.position >= limit) {
    return InvalidArgumentError(options_.path + ": loader state " + state.ToJson() +
                                " is outside this file (position must be < " + Str(limit) +
                                (options_.shuffle ? " windows)" : " tokens)"));
  }
  state_ = state;
  return OkStatus();
}

Status DataLoader::Next(int32_t* inputs, int32_t* targets) {
  if (options_.shuffle) {
    NextShuffled(inputs, targets);
  } else {
    NextSequential(inputs, targets);
  }
  return OkStatus();
}

void DataLoader::NextSequential(int32_t* inputs, int32_t* targets) {
  const int64_t bt = options_.batch * options_.seq;
  const int64_t stride = options_.dp_size * bt;  // one step of all ranks
  // llm.c: wrap before reading when this step's B*T+1 tokens per rank would run off the end.
  if (state_.position + stride + 1 > file_->size()) {
    state_.position = 0;
    ++state_.epoch;
  }
  const int64_t begin = state_.position + options_.dp_rank * bt;
  file_->Copy(begin, bt, inputs);
  file_->Copy(begin + 1, bt, targets);
  state_.position += stride;
}

void DataLoader::NextShuffled(int32_t* inputs, int32_t* targets) {
  const int64_t b = options_.batch;
  const int64_t t = options_.seq;
  const int64_t w = num_windows_;
  const int64_t first = state_.position + options_.dp_rank * b;  // this rank's first row
  for (int64_t row = 0; row < b; ++row) {
    const int64_t index = first + row;  // may run into later epochs when w is small
    const int64_t window = Order(state_.epoch + index / w)[static_cast<size_t>(index % w)];
    file_->Copy(window * t, t, inputs + row * t);
    file_->Copy(window * t + 1, t, targets + row * t);
  }
  state_.position += options_.dp_size * b;
  state_.epoch += state_.position / w;
  state_.position %= w;
}

const std::vector<uint32_t>& DataLoader::Order(int64_t epoch) {
  for (CachedOrder& c : cache_) {
    if (c.epoch == epoch) return c.order;
  }
  // Replace the older entry (a step spans at most the current and a later epoch).
  CachedOrder& slot = cache_[0].epoch < cache_[1].epoch ? cache_[0] : cache_[1];
  slot.epoch = epoch;
  slot.order.resize(static_cast<size_t>(num_windows_));
  std::iota(slot.order.begin(), slot.order.end(), 0u);
  std::mt19937_64 rng(MixSeed(options_.seed ^ MixSeed(static_cast<uint64_t>(epoch))));
  DeterministicShuffle(rng, &slot.order);
  return slot.order;
}

}  // namespace ds::data
