// PpoStep: one DeepSpeed-Chat PPO iteration on a batch of prompts, over the four models of
// step 3, each a Trainer of this rank:
//
//   actor   head ppo_actor (from the SFT model): generates the answers with its own weights (its
//           Generator: the hybrid engine's rollout), gives the old log-probabilities, and trains
//   ref     head lm (the frozen SFT model): the reference log-probabilities of the KL penalty
//   critic  head ppo_critic (from the reward model): the values, and trains
//   reward  head reward (the reward model): the score at each answer's last token; or, instead,
//           a score function (a rule reward)
//
// Then rewards and advantages (ppo_math.h), one actor step (the clipped surrogate) and one
// critic step (the clipped value loss) on the rollout, each through its Trainer's batch source
// and per-token inputs. Prompts of several lengths are left-padded to prompt_len, as the
// generator pads them; the models then take each row's left pads (ModelSpec::pad_mask), so a
// padded row computes exactly the log-probabilities, values and scores it would alone. Every
// rank runs its own prompts; the steps' collectives join the ranks.
//
//   PpoStep ppo(models, options);
//   DS_ASSIGN_OR_RETURN(PpoStepMetrics m, ppo.Run(prompts, iteration));
//
// With generation_batches or ppo_epochs above 1 the later updates train on log-probabilities
// the actor has moved away from, so the ratio leaves 1 and the clip engages; with both at 1
// every ratio is 1 and the clip never acts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/generate/generator.h"
#include "runtime/rlhf/ppo_math.h"
#include "runtime/worker/trainer.h"

namespace ds::rlhf {

struct PpoModels {
  worker::Trainer* actor = nullptr;
  worker::Trainer* ref = nullptr;
  worker::Trainer* critic = nullptr;
  worker::Trainer* reward = nullptr;  // or score, below
  // A rule reward instead of a reward model: the score of (prompt, answer tokens).
  std::function<double(const std::vector<int32_t>&, const std::vector<int32_t>&)> score;
};

struct PpoOptions {
  PpoSettings ppo;
  // DeepSpeed-Chat's: rollouts generated (each of the actor's global batch) before the updates,
  // and passes of updates over them (each update one actor and one critic step per rollout).
  int generation_batches = 1;
  int ppo_epochs = 1;
  // An exponential moving average of the actor's weights after every actor step (this rank's
  // fp32 master, sharded as it is): ema = decay ema + (1 - decay) w.
  bool enable_ema = false;
  double ema_decay = 0.992;
  int64_t max_new_tokens = 8;
  // The prompts' width: shorter ones are left-padded to it (0: the longest of each call's).
  // Padded rows need pad_mask models (ModelSpec::pad_mask) for all four roles.
  int64_t prompt_len = 0;
  // ptx: the weight of the pretraining step's LM loss (DeepSpeed-Chat's unsup_coef; InstructGPT's
  // 27.8, which DeepSpeed-Chat's README found unstable).
  double unsup_coef = 27.8;
  // The hybrid engine's tensor-parallel rollouts (DeepSpeed's inference_tp_size,
  // tp_gather_partition_size): groups of inference_tp ranks generate together, each from its
  // slice of the actor cut tp_gather_partition_size blocks at a time
  // (worker/tp_generator.h); 1: every rank generates from the whole actor.
  int inference_tp = 1;
  int tp_gather_partition_size = 8;
  // DeepSpeed's pin_parameters: true gathers the whole actor for a rollout (inference_tp 1);
  // false gathers tp_gather_partition_size blocks at a time in every forward of the generation
  // (every rank decodes until no rank has a live sequence).
  bool pin_parameters = true;
  std::vector<int32_t> stop_tokens;
  int32_t pad_token = 0;
  generate::SamplingOptions sampling{false};  // sampled rollouts (temperature 1)
};

struct PpoStepMetrics {
  double mean_score = 0;                   // the reward (model or rule), before clipping
  double mean_kl = 0;                      // per answer token: logprob - ref logprob, averaged
  double mean_advantage = 0;               // per answer token
  double actor_loss = 0, critic_loss = 0;  // means over the updates
  std::vector<double> actor_losses, critic_losses;  // per update, in order
  double answer_tokens = 0;                         // per sequence
  double ptx_loss = 0;             // the pretraining steps' mean LM loss (unscaled)
  std::vector<double> ptx_losses;  // per pretraining step
  double generate_ms = 0, train_ms = 0;
  std::vector<std::vector<int32_t>> answers;
};

class PpoStep {
 public:
  // InvalidArgument naming the model whose head does not fit its role.
  static StatusOr<std::unique_ptr<PpoStep>> Create(const PpoModels& models,
                                                   const PpoOptions& options);
  ~PpoStep();
  // `prompts` (1 to prompt_len tokens; generation_batches x the actor's global batch on this
  // rank);
  // `iteration` seeds the sampling.
  // `ptx` (optional, DeepSpeed-Chat's unsupervised training): generation_batches x the actor's
  // batch rows of plain-text tokens, seq each; after each rollout's actor and critic steps the
  // actor takes one step of unsup_coef x their LM loss (every position but the last).
  StatusOr<PpoStepMetrics> Run(const std::vector<std::vector<int32_t>>& prompts, int64_t iteration,
                               const std::vector<std::vector<int32_t>>& ptx = {});
  // The actor's weights' moving average (enable_ema), this rank's master elements; empty
  // before the first step.
  const std::vector<float>& ema() const;
  // The moving average as safetensors with the actor's parameter names (DeepSpeed-Chat's
  // actor_ema): the ranks' master-layout parts gathered (Trainer::MasterLayoutToFull), rank 0
  // writes; every rank calls it. FailedPrecondition before the first EMA update.
  Status SaveEma(const std::string& path);
  // Resume: the moving average from a file SaveEma wrote, this rank's part of it.
  Status LoadEma(const std::string& path);

 private:
  struct Impl;
  explicit PpoStep(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::rlhf
