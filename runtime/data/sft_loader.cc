#include "runtime/data/sft_loader.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/data/random.h"

namespace ds::data {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

Status CheckOptions(const SftLoader::Options& o) {
  const std::string p = "data.sft: ";
  if (o.batch < 1) return InvalidArgumentError(p + "batch size must be >= 1");
  if (o.seq < 1) return InvalidArgumentError(p + "seq_len must be >= 1");
  if (o.max_prompt_seq_len < 0 || o.max_answer_seq_len < 0)
    return InvalidArgumentError(p + "max_prompt_seq_len and max_answer_seq_len must be >= 0");
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size)
    return InvalidArgumentError(p + "dp_rank " + Str(o.dp_rank) + " is not in [0, dp_size " +
                                Str(o.dp_size) + ")");
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<SftLoader>> SftLoader::Open(const Options& o) {
  DS_RETURN_IF_ERROR(CheckOptions(o));
  DS_ASSIGN_OR_RETURN(IndexedDataset prompts, IndexedDataset::Open(o.prompt));
  DS_ASSIGN_OR_RETURN(IndexedDataset answers, IndexedDataset::Open(o.answer));
  if (prompts.sequences() != answers.sequences())
    return InvalidArgumentError("data.sft: " + o.prompt + " holds " + Str(prompts.sequences()) +
                                " prompts and " + o.answer + " " + Str(answers.sequences()) +
                                " answers; they pair line by line (ds-data preprocess "
                                "--json-keys prompt chosen writes both from one file)");
  if (prompts.sequences() == 0) return InvalidArgumentError("data.sft: " + o.prompt + " is empty");
  return std::unique_ptr<SftLoader>(new SftLoader(o, std::move(prompts), std::move(answers)));
}

SftLoader::SftLoader(const Options& o, IndexedDataset prompts, IndexedDataset answers)
    : options_(o), prompts_(std::move(prompts)), answers_(std::move(answers)) {}

Status SftLoader::SetState(const DataLoaderState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position >= pairs())
    return InvalidArgumentError("data.sft: loader state " + state.ToJson() + " is outside these " +
                                Str(pairs()) + " pairs");
  state_ = state;
  return OkStatus();
}

// The pair at `position` of `epoch`'s order (a seeded permutation, or the file's order).
int64_t SftLoader::PairAt(int64_t epoch, int64_t position) {
  if (!options_.shuffle) return position;
  if (order_epoch_ != epoch) {
    order_.resize(static_cast<size_t>(pairs()));
    std::iota(order_.begin(), order_.end(), int64_t{0});
    std::mt19937_64 rng(MixSeed(options_.seed ^ MixSeed(static_cast<uint64_t>(epoch))));
    DeterministicShuffle(rng, &order_);
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(position)];
}

Status SftLoader::Row(int64_t pair, int32_t* inputs, int32_t* targets, int32_t* pads) {
  const Options& o = options_;
  DS_RETURN_IF_ERROR(prompts_.Tokens(pair, &prompt_));
  DS_RETURN_IF_ERROR(answers_.Tokens(pair, &answer_));
  if (o.max_prompt_seq_len > 0 && static_cast<int64_t>(prompt_.size()) > o.max_prompt_seq_len)
    prompt_.erase(prompt_.begin(), prompt_.end() - o.max_prompt_seq_len);  // keep its end
  if (o.max_answer_seq_len > 0 && static_cast<int64_t>(answer_.size()) > o.max_answer_seq_len)
    answer_.resize(static_cast<size_t>(o.max_answer_seq_len));
  if (o.eod >= 0) answer_.push_back(o.eod);
  // Row position k of the seq + 1 holds token k - shift: the real ones [shift, shift + total).
  const int64_t n = static_cast<int64_t>(prompt_.size());
  const int64_t total = std::min<int64_t>(n + answer_.size(), o.seq + 1);
  const int64_t shift = o.left_pads ? std::min<int64_t>(o.seq + 1 - total, o.seq - 1) : 0;
  const int32_t pad = static_cast<int32_t>(std::max<int64_t>(o.eod, 0));
  auto token = [&](int64_t k) -> int64_t {
    k -= shift;
    return k < 0 ? pad : k < n ? prompt_[k] : k < total ? answer_[k - n] : pad;
  };
  for (int64_t t = 0; t < o.seq; ++t) {
    inputs[t] = static_cast<int32_t>(token(t));
    // The next token is scored when it is the answer's (or the end token), not a pad.
    const int64_t next = t + 1 - shift;
    targets[t] = next >= n && next < total ? static_cast<int32_t>(token(t + 1)) : kIgnore;
  }
  if (pads) *pads = static_cast<int32_t>(shift);
  return OkStatus();
}

Status SftLoader::Next(int32_t* inputs, int32_t* targets) {
  const int64_t b = options_.batch, t = options_.seq;
  int64_t epoch = state_.epoch, position = state_.position + options_.dp_rank * b;
  for (int64_t i = 0; i < b; ++i, ++position) {
    while (position >= pairs()) {  // runs on into the next epoch's order
      position -= pairs();
      ++epoch;
    }
    DS_RETURN_IF_ERROR(Row(PairAt(epoch, position), inputs + i * t, targets + i * t,
                           options_.left_pads ? options_.left_pads + i : nullptr));
  }
  state_.position += options_.dp_size * b;
  while (state_.position >= pairs()) {
    state_.position -= pairs();
    ++state_.epoch;
  }
  return OkStatus();
}

}  // namespace ds::data
