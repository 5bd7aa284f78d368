// ExampleBatches: a Trainer's micro-batches (data::BatchSource) from rows built in memory
// (token_examples.h). An item is one example's rows (SFT: 1; a reward pair: 2, chosen then
// rejected); a micro-batch of B rows holds B / rows_per_item items laid out row-block by
// row-block, so a reward micro-batch is its chosen rows, then their rejected rows in the same
// order (what reward_pair_loss pairs up). Every epoch a permutation seeded by (seed, epoch)
// orders the items; each micro-batch takes the next dp_size x items and rank r its r-th share,
// so ranks never share an item within an epoch; an epoch's last items that fill no whole
// micro-batch on every rank wait for the next epoch's order. The state (epoch, position) is the
// same on every rank.
//
//   ExampleBatches b(std::move(pairs), {/*batch=*/8, /*rows_per_item=*/2, seed, rank, world});
//   trainer->SetBatchSource(&b);
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/batch_source.h"
#include "runtime/rlhf/token_examples.h"

namespace ds::rlhf {

struct ExampleBatchOptions {
  int64_t batch = 1;          // rows per micro-batch (the trainer's micro-batch size)
  int64_t rows_per_item = 1;  // 1 (SFT) or 2 (reward pairs)
  uint64_t seed = 1234;
  int dp_rank = 0, dp_size = 1;
};

class ExampleBatches final : public data::BatchSource {
 public:
  // `items[i]` holds rows_per_item rows of equal length. InvalidArgument (from Check) for an
  // empty list, rows of other counts or lengths, a batch rows_per_item does not divide, or
  // fewer items than one micro-batch on every rank.
  static StatusOr<ExampleBatches> Create(std::vector<std::vector<TokenExample>> items,
                                         const ExampleBatchOptions& options);

  Status Next(int32_t* inputs, int32_t* targets) override;

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // items of this epoch's order used
  // Back to (epoch, position) as another run reported them (a resume).
  Status Seek(int64_t epoch, int64_t position);
  int64_t items_per_micro_batch() const { return options_.batch / options_.rows_per_item; }

 private:
  ExampleBatches(std::vector<std::vector<TokenExample>> items, const ExampleBatchOptions& o)
      : items_(std::move(items)), options_(o) {}
  void Order();  // this epoch's permutation

  std::vector<std::vector<TokenExample>> items_;
  ExampleBatchOptions options_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, position_ = 0;
};

}  // namespace ds::rlhf
