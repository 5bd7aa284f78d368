// What ds-chat's steps share (chat_steps.h): the datasets, their split, the tokenizer as an
// Encoding of seq = prompt_len + answer_len, and the models each step trains or reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/generate/tokenizer.h"
#include "runtime/rlhf/chat_config.h"
#include "runtime/rlhf/preference_data.h"
#include "runtime/rlhf/token_examples.h"
#include "runtime/worker/trainer.h"

namespace ds::rlhf {

struct ChatData {
  ChatConfig config;
  std::vector<PreferenceDataset> datasets;
  std::vector<double> split;
  std::shared_ptr<generate::Tokenizer> tokenizer;  // null: the addition characters
  Encoding encoding;
  std::vector<int32_t> stop;
  int64_t seq() const { return config.prompt_len + config.answer_len; }
  // Step `part`'s examples (0: SFT, 1: reward, 2: PPO), blended.
  std::vector<PreferenceExample> Part(int part) const;
};

StatusOr<ChatData> OpenChat(const ChatConfig& c);

// ptx's rows (ppo.unsupervised_dataset): each line of the text file encoded, the end text after
// it, all concatenated and cut into rows of seq tokens (the tail dropped), as DeepSpeed-Chat
// groups its unsupervised texts into blocks; empty without the file. InvalidArgument naming the
// file (and line) when it cannot be read or encoded, or holds less than one row.
StatusOr<std::vector<std::vector<int32_t>>> PtxRows(const ChatData& d);

// A trainer of job file `job` with model head `head` at seq tokens, on `comm`, initialized from
// `weights` (a safetensors file; keep_missing: a new head keeps its initialization), saving its
// checkpoints under `checkpoints` (empty: the job's).
StatusOr<std::unique_ptr<worker::Trainer>> ChatModel(
    const std::string& job, const std::string& head, int64_t seq, parallel::Communicator* comm,
    const std::string& weights = "", bool keep_missing = false, const std::string& checkpoints = "",
    bool pad_mask = false);

// Writes `t`'s weights to `path` (rank 0; every rank joins, and waits for the file).
Status ExportModel(worker::Trainer& t, const std::string& path, parallel::Communicator* comm);

// Rows' prompts and the answers a greedy model must give them (chosen, then the end tokens),
// encoded; InvalidArgument naming the prompt that is empty or longer than prompt_len.
struct Answers {
  std::vector<std::vector<int32_t>> prompts, chosen;
};
StatusOr<Answers> EncodeAnswers(const ChatData& d, const std::vector<PreferenceExample>& rows);

// The model's greedy exact match on `a` (whole batches of 16; the rest unused) (chat_ppo.cc).
StatusOr<double> ExactMatch(const ChatData& d, worker::Trainer& model, const Answers& a);
// ExactMatch on step 3's held-out prompts (the last ppo.eval_prompts of its part).
StatusOr<double> HeldOutExactMatch(const ChatData& d, worker::Trainer& model);

}  // namespace ds::rlhf
