// PPO with the hybrid engine's tensor-parallel rollouts (DeepSpeed's inference_tp_size) on a
// ZeRO-3 actor over 2 ranks (threads): the two ranks form one tp group, cut their slices of the
// actor a block at a time (tp_gather_partition_size 1) and generate both ranks' prompts together.
// The answers are those each rank generates alone from the whole actor, greedy or sampled (rank
// w's prompt b samples as sequence w n + b either way), so every iteration's reward, KL and
// losses equal the inference_tp 1 run's. So do they without pinned parameters (pin_parameters
// false: every forward of the generation gathers the units a block at a time).
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/plan/model_loader.h"
#include "runtime/rlhf/ppo_step.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::rlhf {
namespace {

StatusOr<std::unique_ptr<worker::Trainer>> Model(const std::string& head, int stage,
                                                 parallel::Communicator* comm) {
  const std::string yaml =
      "train_batch_size: 16\ntrain_micro_batch_size_per_gpu: 8\ngradient_clipping: 1.0\n"
      "optimizer: {type: AdamW, params: {lr: 0.003}}\n"
      "zero_optimization: {stage: " +
      std::to_string(stage) +
      ", stage3_param_persistence_threshold: 100}\n"
      "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, "
      "max_seq_len: 16}\ndata: {seq_len: 8}\ntraining: {train_iters: 100}\n"
      "device: {type: cpu, threads: 1}\n";
  DS_ASSIGN_OR_RETURN(config::JobConfig c, config::ParseJobConfig(yaml, head + ".yaml"));
  c.model.head = head;
  DS_ASSIGN_OR_RETURN(Graph g, plan::LoadModelGraph(c));
  DS_ASSIGN_OR_RETURN(auto t, worker::Trainer::Create(c, std::move(g), comm));
  DS_RETURN_IF_ERROR(t->Initialize());
  return t;
}

double Fives(const std::vector<int32_t>&, const std::vector<int32_t>& answer) {
  double n = 0;
  for (int32_t t : answer) n += t == 5;
  return answer.empty() ? 0.0 : n / answer.size();
}

// Rank 0's figures per iteration: reward, KL, actor loss, critic loss.
std::vector<std::vector<double>> Run(int inference_tp, bool greedy, bool pin = true) {
  std::vector<std::vector<double>> out;
  std::vector<Status> errors =
      testing::OnRanks(2, [&](int rank, parallel::Communicator* c) -> Status {
        DS_ASSIGN_OR_RETURN(auto actor, Model("ppo_actor", 3, c));
        DS_ASSIGN_OR_RETURN(auto ref, Model("lm", 0, c));
        DS_ASSIGN_OR_RETURN(auto critic, Model("ppo_critic", 1, c));
        PpoOptions o;
        o.max_new_tokens = 6;
        o.sampling.greedy = greedy;
        o.sampling.seed = 31;
        o.inference_tp = inference_tp;
        o.tp_gather_partition_size = 1;
        o.pin_parameters = pin;
        DS_ASSIGN_OR_RETURN(
            auto ppo, PpoStep::Create({actor.get(), ref.get(), critic.get(), nullptr, Fives}, o));
        std::mt19937 rng(20 + rank);  // each rank its own prompts
        for (int it = 0; it < 6; ++it) {
          std::vector<std::vector<int32_t>> prompts(8);
          for (auto& p : prompts)
            p = {static_cast<int32_t>(rng() % 16), static_cast<int32_t>(rng() % 16)};
          DS_ASSIGN_OR_RETURN(PpoStepMetrics m, ppo->Run(prompts, it));
          if (rank == 0) out.push_back({m.mean_score, m.mean_kl, m.actor_loss, m.critic_loss});
        }
        return OkStatus();
      });
  for (const Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  return out;
}

TEST_CASE("PPO: tensor-parallel rollouts give the whole actor's", "[rlhf][ppo][hybrid]") {
  for (bool greedy : {true, false}) {
    INFO((greedy ? "greedy" : "sampled") << " rollouts");
    const auto whole = Run(1, greedy), sliced = Run(2, greedy), unpinned = Run(1, greedy, false);
    REQUIRE(whole.size() == 6);
    REQUIRE(sliced.size() == 6);
    REQUIRE(unpinned.size() == 6);
    for (size_t it = 0; it < whole.size(); ++it)
      for (size_t k = 0; k < 4; ++k) {
        INFO("iteration " << it << ", figure " << k);
        CHECK(sliced[it][k] == Approx(whole[it][k]).margin(1e-6));
        CHECK(unpinned[it][k] == Approx(whole[it][k]).margin(1e-6));
      }
  }
}

}  // namespace
}  // namespace ds::rlhf
