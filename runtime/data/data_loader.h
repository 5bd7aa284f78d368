// DataLoader: micro-batches of (inputs, targets) for one data-parallel rank from a token file.
//
//   DataLoaderOptions o;
//   o.path = "train.tok"; o.batch = 4; o.seq = 64;
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader, DataLoader::Open(o));
//   DS_RETURN_IF_ERROR(loader->Next(inputs, targets));              // B*T int32 each
//   std::string saved = loader->state().ToJson();   // into the checkpoint
//
// Two orders (README.md "Batch order"):
//  - shuffle = false: llm.c's order. A micro-batch is B*T+1 consecutive tokens; inputs are
//    the first B*T, targets the same shifted by one. Rank r reads at position + r*B*T; the
//    position advances by dp_size*B*T and wraps to 0 when fewer than dp_size*B*T+1 tokens
//    remain (for one rank: fewer than B*T+1).
//  - shuffle = true: the file is cut into windows of T+1 tokens at stride T; every epoch a
//    permutation seeded by (seed, epoch) orders them; a batch row is one window. Each step
//    takes the next dp_size*B windows, rank r rows [r*B, r*B + B), so ranks never share a
//    window within an epoch; a step may run on into the next epoch's order.
// In both orders the state is global (the same on every rank): saving it on rank 0 and
// restoring it on all ranks, even with another dp_size, resumes the stream.
//
// Not thread-safe: one loader per rank, called from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/token_file.h"
#include "runtime/data/train_source.h"

namespace ds::data {

struct DataLoaderOptions {
  std::string path;  // token file
  TokenFileFormat format = TokenFileFormat::kAuto;
  int64_t batch = 1;  // B: rows per micro-batch
  int64_t seq = 0;    // T: tokens per row
  bool shuffle = true;
  uint64_t seed = 1234;
  int dp_rank = 0;  // this rank, in [0, dp_size)
  int dp_size = 1;  // data-parallel ranks reading the same file
};

class DataLoader final : public TrainSource {
 public:
  // Opens the file and checks it can serve batches: B, T >= 1, 0 <= dp_rank < dp_size, at least
  // T+1 tokens (shuffle) or dp_size*B*T+1 tokens (sequential). Errors name the file.
  static StatusOr<std::unique_ptr<DataLoader>> Open(const DataLoaderOptions& options);

  // Fills inputs[B*T] and targets[B*T] (row-major [B, T]) and advances. Returns OK today:
  // every check happens in Open (the Status leaves room for a prefetching reader).
  Status Next(int32_t* inputs, int32_t* targets) override;

  DataLoaderState state() const override { return state_; }
  // InvalidArgument when the position lies outside the file (e.g. a state from another file).
  Status SetState(const DataLoaderState& state) override;
  // Back to epoch 0, position 0 (e.g. before each evaluation pass).
  void Reset() override { state_ = DataLoaderState(); }

  const DataLoaderOptions& options() const { return options_; }
  const TokenFile& file() const { return *file_; }
  // Steps in one pass over the file (whole steps only; the remainder is skipped or wraps).
  int64_t steps_per_epoch() const;
  // Shuffle only: number of T+1 windows.
  int64_t num_windows() const { return num_windows_; }

 private:
  DataLoader(const DataLoaderOptions& options, std::unique_ptr<TokenFile> file);
  void NextSequential(int32_t* inputs, int32_t* targets);
  void NextShuffled(int32_t* inputs, int32_t* targets);
  // The window order of `epoch` (cached for the two most recent epochs).
  const std::vector<uint32_t>& Order(int64_t epoch);

  const DataLoaderOptions options_;
  const std::unique_ptr<TokenFile> file_;
  const int64_t num_windows_;  // shuffle: (tokens - 1) / T
  DataLoaderState state_;
  struct CachedOrder {
    int64_t epoch = -1;
    std::vector<uint32_t> order;
  };
  CachedOrder cache_[2];
};

}  // namespace ds::data
