// DeepSpeed-Chat's three steps as ds-chat runs them (chat_config.h), on this rank of `comm`
// (null: one rank), each reporting progress lines to `log`:
//
//   RunSft     step 1: the actor's job with the LM head on part 1's prompt + chosen rows
//              (answer-only loss); writes output/sft.safetensors
//   RunReward  step 2: the reward job (head reward) from the SFT weights (its value head new) on
//              part 2's (chosen, rejected) pairs, 10% held out for the pairwise accuracy and
//              the chosen / rejected mean scores; writes output/reward.safetensors
//   RunPpo     step 3: actor and reference from the SFT weights, critic and reward model from
//              the reward weights; PPO iterations on part 3's prompts, held-out prompts answered
//              greedily before and after (exact match with the chosen answer, mean reward);
//              writes output/actor.safetensors and output/ppo.csv (one row per iteration)
#pragma once

#include <ostream>

#include "parallel/comm/communicator.h"
#include "runtime/base/status.h"
#include "runtime/rlhf/chat_config.h"

namespace ds::rlhf {

Status RunSft(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log);
Status RunReward(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log);
Status RunPpo(const ChatConfig& c, parallel::Communicator* comm, std::ostream& log);

}  // namespace ds::rlhf
