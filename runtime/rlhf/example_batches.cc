#include "runtime/rlhf/example_batches.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "runtime/data/random.h"

namespace ds::rlhf {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

StatusOr<ExampleBatches> ExampleBatches::Create(std::vector<std::vector<TokenExample>> items,
                                                const ExampleBatchOptions& o) {
  auto bad = [](const std::string& why) { return InvalidArgumentError("rlhf batches: " + why); };
  if (o.rows_per_item < 1 || o.batch < o.rows_per_item || o.batch % o.rows_per_item != 0)
    return bad("a micro-batch of " + Str(o.batch) + " rows does not hold whole items of " +
               Str(o.rows_per_item) + " rows");
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size)
    return bad("rank " + Str(o.dp_rank) + " of " + Str(o.dp_size));
  const int64_t per_step = o.batch / o.rows_per_item * o.dp_size;
  if (static_cast<int64_t>(items.size()) < per_step)
    return bad(Str(items.size()) + " examples; one micro-batch on each of " + Str(o.dp_size) +
               " ranks takes " + Str(per_step));
  const size_t seq = items[0].empty() ? 0 : items[0][0].ids.size();
  for (size_t i = 0; i < items.size(); ++i) {
    if (static_cast<int64_t>(items[i].size()) != o.rows_per_item)
      return bad("example " + Str(i) + " has " + Str(items[i].size()) + " rows, not " +
                 Str(o.rows_per_item));
    for (const TokenExample& r : items[i])
      if (r.ids.size() != seq || r.targets.size() != seq || seq == 0)
        return bad("example " + Str(i) + "'s rows are not all " + Str(seq) + " tokens");
  }
  ExampleBatches b(std::move(items), o);
  b.Order();
  return b;
}

void ExampleBatches::Order() {
  order_.resize(items_.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::mt19937_64 rng(data::MixSeed(options_.seed * 1000003ull + static_cast<uint64_t>(epoch_)));
  data::DeterministicShuffle(rng, &order_);
}

Status ExampleBatches::Next(int32_t* inputs, int32_t* targets) {
  const int64_t k = items_per_micro_batch(), step = k * options_.dp_size;
  if (position_ + step > static_cast<int64_t>(items_.size())) {
    ++epoch_;
    position_ = 0;
    Order();
  }
  const int64_t seq = static_cast<int64_t>(items_[0][0].ids.size());
  for (int64_t i = 0; i < k; ++i) {
    const std::vector<TokenExample>& item = items_[order_[position_ + options_.dp_rank * k + i]];
    for (int64_t s = 0; s < options_.rows_per_item; ++s) {
      const int64_t row = s * k + i;
      std::copy(item[s].ids.begin(), item[s].ids.end(), inputs + row * seq);
      std::copy(item[s].targets.begin(), item[s].targets.end(), targets + row * seq);
    }
  }
  position_ += step;
  return OkStatus();
}

Status ExampleBatches::Seek(int64_t epoch, int64_t position) {
  if (epoch < 0 || position < 0 || position > static_cast<int64_t>(items_.size()))
    return InvalidArgumentError("rlhf batches: position " + Str(position) + " of epoch " +
                                Str(epoch) + " is outside " + Str(items_.size()) + " examples");
  epoch_ = epoch;
  position_ = position;
  Order();
  return OkStatus();
}

}  // namespace ds::rlhf
