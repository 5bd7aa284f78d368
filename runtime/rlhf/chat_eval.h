// ds-chat's held-out measures:
//   EvaluatePairs    a reward model's pairwise accuracy on (chosen, rejected) pairs and the mean
//                    scores of each side (DeepSpeed-Chat's step-2 evaluation)
//   EvaluateAnswers  the actor's greedy answers to prompts: exact match with the chosen
//                    answers, and the reward model's mean score of them (rm null: none)
// Both run forward only (inference executors; the generator after GatherParams).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/rlhf/token_examples.h"
#include "runtime/worker/trainer.h"

namespace ds::rlhf {

struct PairEval {
  double accuracy = 0, chosen_mean = 0, rejected_mean = 0;
};
// `pairs`: [chosen, rejected] rows (RewardPair's).
StatusOr<PairEval> EvaluatePairs(worker::Trainer& rm,
                                 const std::vector<std::vector<TokenExample>>& pairs);

struct AnswerEval {
  double exact = 0, mean_score = 0;
  int64_t count = 0;
  std::vector<std::vector<int32_t>> answers;  // per prompt evaluated, in order
};
// `prompts` of one length, `chosen` the answers they should get (their tokens, the stop token
// last), `answer_len` new tokens at most, `pad` after them.
StatusOr<AnswerEval> EvaluateAnswers(worker::Trainer& actor, worker::Trainer* rm,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& chosen,
                                     const std::vector<int32_t>& stop, int64_t answer_len,
                                     int32_t pad);

// The reward model's score of each row: its value at the position `ends` marks (one per row;
// an even number of rows).
StatusOr<std::vector<float>> Scores(exec::Executor& rm, const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& ends, int64_t seq);

}  // namespace ds::rlhf
