// The RLHF steps' training rows, built from DeepSpeed-Chat examples (preference_data.h) and a
// tokenizer, each seq tokens right-padded (a causal model's padding after the text changes
// nothing before it):
//
//   SftExample   prompt + chosen + end tokens; targets are the next token on the answer's
//                positions only (DeepSpeed-Chat's step 1 loss on the answer), kIgnore (the
//                cross-entropy's ignore_index) on the prompt and the padding
//   RewardPair   prompt + chosen + end and prompt + rejected + end; targets 1 at each
//                sequence's last non-pad token (where the reward model scores it,
//                reward_pair_loss), 0 elsewhere
//
// Sequences longer than seq are cut to seq (the tokenizer's truncation, as DeepSpeed-Chat's);
// an SFT example whose prompt leaves no answer token is refused by index.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/rlhf/preference_data.h"

namespace ds::rlhf {

inline constexpr int32_t kIgnore = -100;  // cross_entropy's default ignore_index

struct TokenExample {
  std::vector<int32_t> ids, targets;  // seq each
};

struct Encoding {
  std::function<StatusOr<std::vector<int32_t>>(const std::string&)> encode;
  std::vector<int32_t> end;  // appended to every answer (DeepSpeed-Chat: <|endoftext|>)
  int32_t pad = 0;
  int64_t seq = 0;
};

StatusOr<TokenExample> SftExample(const PreferenceExample& e, const Encoding& enc);
// [chosen, rejected]. InvalidArgument when the example has no rejected answer.
StatusOr<std::vector<TokenExample>> RewardPair(const PreferenceExample& e, const Encoding& enc);

}  // namespace ds::rlhf
