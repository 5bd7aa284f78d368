// The ds-chat configuration: DeepSpeed-Chat's three steps from one YAML file. Each model's
// training (ZeRO stage, precision, optimizer, model shape) is a job file of its own, as a
// DeepSpeed config per model; paths are relative to this file.
//
//   data: {files: [pairs.jsonl], data_split: "2,4,4", seed: 1234}
//   tokenizer: addition            # the addition task's characters, or a tokenizer file
//   prompt_len: 8                  # DeepSpeed-Chat's max_prompt_seq_len (shorter prompts are
//   answer_len: 6                  #   left-padded in step 3); max_answer_seq_len
//   end: ""                        # text appended to every answer (<|endoftext|>)
//   stop: "$"                      # text whose tokens end a generated answer
//   output: runs/chat              # sft.safetensors, reward.safetensors, actor.safetensors,
//                                  # ppo.csv
//   sft: {job: sft.yaml, steps: 300,    # steps at most;
//         stop_at_exact_match: 0.7,   # stop once greedy exact match on 64 of step 1's rows
//         eval_interval: 10}          #   (held out from its training) reaches this share
//                                     #   (0: never), checked every eval_interval steps
//   reward: {job: reward.yaml, steps: 300,  # likewise: pairwise accuracy on 256 of step 2's
//            stop_at_pairwise_accuracy: 0.99, eval_interval: 500}  # training pairs
//   ppo: {actor: actor.yaml, critic: critic.yaml, iterations: 60, kl_ctl: 0.1,
//         clip_reward_value: 5, cliprange: 0.2, cliprange_value: 0.2, gamma: 1.0, lam: 0.95,
//         generation_batches: 1, ppo_epochs: 1, enable_ema: false, temperature: 1.0,
//         eval_prompts: 200, save_interval: 0, resume: false,
//         unsupervised_dataset: text.txt, unsup_coef: 27.8}
// The actor's rollouts follow its job file's hybrid_engine section (DeepSpeed's names:
// inference_tp_size, tp_gather_partition_size, max_out_tokens).
//
// Unknown keys are refused by name (a misspelt DeepSpeed-Chat option would silently do nothing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/rlhf/ppo_math.h"

namespace ds::rlhf {

struct ChatStep {
  std::string job;  // a job file (resolved)
  int64_t steps = 0;
  // Stop once the step's measure on rows held out from its training reaches this share,
  // checked every eval_interval steps; 0: run all `steps`. sft: greedy exact match on
  // kSftCheckRows rows (stop_at_exact_match); reward: pairwise accuracy on kRewardCheckPairs
  // pairs (stop_at_pairwise_accuracy).
  double stop_at = 0;
  int64_t eval_interval = 10;
};
inline constexpr int64_t kSftCheckRows = 64, kRewardCheckPairs = 256;

struct ChatPpo {
  std::string actor, critic;  // job files (resolved)
  int64_t iterations = 0;
  PpoSettings ppo;
  int generation_batches = 1, ppo_epochs = 1;
  bool enable_ema = false;
  double temperature = 1.0;
  int64_t eval_prompts = 200;  // held-out prompts of step 3's part, answered greedily
  // Checkpoints of the actor, the critic and the PPO state (output/ppo_ckpt) every
  // save_interval iterations (0: at the end); resume: go on from the latest one.
  int64_t save_interval = 0;
  bool resume = false;
  // ptx (DeepSpeed-Chat's unsupervised_dataset_name / unsup_coef): a text file, one document
  // per line, whose blocks of seq tokens give one extra actor step of unsup_coef x their LM loss
  // after each rollout's PPO step; empty: none.
  std::string unsupervised_dataset;
  double unsup_coef = 27.8;
};

struct ChatConfig {
  std::string source;
  std::vector<std::string> files;
  std::string data_split = "2,4,4";
  uint64_t seed = 1234;
  std::string tokenizer = "addition";
  int64_t prompt_len = 0, answer_len = 0;
  std::string end, stop;
  std::string output = "runs/chat";
  ChatStep sft, reward;
  ChatPpo ppo;
};

// InvalidArgument naming the file, the key and the problem.
StatusOr<ChatConfig> LoadChatConfig(const std::string& path);

}  // namespace ds::rlhf
