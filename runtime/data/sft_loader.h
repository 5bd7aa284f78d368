// SftLoader: supervised fine-tuning rows from prompt / answer pairs, the loss on the answer
// only. The pairs are two Megatron indexed datasets written side by side by
// `ds-data preprocess --json-keys prompt chosen` (one sequence per JSON line in each, so
// sequence i of both is line i; DeepSpeed-Chat's field names: prompt, chosen or response).
//
//   SftLoader::Options o;
//   o.prompt = "sft_prompt_document"; o.answer = "sft_chosen_document";
//   o.batch = 4; o.seq = 512; o.eod = 50256;
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<SftLoader> l, SftLoader::Open(o));
//   DS_RETURN_IF_ERROR(l->Next(inputs, targets));
//
// A row, as DeepSpeed-Chat builds them: the prompt's last max_prompt_seq_len tokens (its step
// 3 keeps a prompt's end), the answer's first max_answer_seq_len, the end token (eod, when
// given), all cut to seq + 1 tokens (its step 1's max_seq_len) and right-padded with the end
// token (0 without one). Inputs are the first seq tokens; a target is the next token where that
// token is part of the answer or the end token, else ignored (-100): the prompt and the pads
// carry no loss. With left_pads (a model with pad_mask: its kLeftPads input) the pads go
// before the row instead (at most seq - 1 of them) and left_pads[i] receives row i's count, so
// its real tokens compute what they compute unpadded. Order: every epoch a seeded permutation of
// the pairs (the DataLoader's shuffle); each step takes the next dp_size x batch pairs, rank r rows
// [r*batch, (r+1)*batch); a step may run on into the next epoch. The state (epoch, position in the
// permutation) is the same on every rank: resume works at any dp_size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/data/train_source.h"

namespace ds::data {

class SftLoader final : public TrainSource {
 public:
  struct Options {
    std::string prompt;  // indexed dataset prefixes, sequence i of each = pair i
    std::string answer;
    int64_t batch = 1;
    int64_t seq = 0;
    int64_t max_prompt_seq_len = 0;  // 0 = no limit but seq
    int64_t max_answer_seq_len = 0;
    int64_t eod = -1;  // appended after each answer; -1 = none
    bool shuffle = true;
    uint64_t seed = 1234;
    int dp_rank = 0;
    int dp_size = 1;
    // Left padding: each row's pad count, int32 [batch], written by every Next (the graph's
    // "pad.left" input); null = right padding.
    int32_t* left_pads = nullptr;
  };
  static constexpr int32_t kIgnore = -100;

  // Opens both datasets and checks they pair up (the same number of sequences) and that every
  // option is in range; errors name the dataset or the option.
  static StatusOr<std::unique_ptr<SftLoader>> Open(const Options& options);

  Status Next(int32_t* inputs, int32_t* targets) override;
  DataLoaderState state() const override { return state_; }
  Status SetState(const DataLoaderState& state) override;
  void Reset() override { state_ = DataLoaderState(); }

  int64_t pairs() const { return prompts_.sequences(); }
  // Row `pair` as above: inputs[seq], targets[seq]; *pads the left pads (0 when right-padded).
  Status Row(int64_t pair, int32_t* inputs, int32_t* targets, int32_t* pads = nullptr);

 private:
  SftLoader(const Options& o, IndexedDataset prompts, IndexedDataset answers);
  int64_t PairAt(int64_t epoch, int64_t position);

  const Options options_;
  IndexedDataset prompts_, answers_;
  DataLoaderState state_;
  std::vector<int64_t> prompt_, answer_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace ds::data
