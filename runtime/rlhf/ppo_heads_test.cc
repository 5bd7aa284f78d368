// PPO's two models through the Trainer: the actor (model head ppo_actor: the logits and the
// clipped surrogate) and the critic (ppo_critic: the value head and the clipped value loss),
// their per-token inputs written into the trainer's buffers by the batch source. The first
// step's loss equals ppo_math's ActorLoss / CriticLoss (themselves checked against the numpy
// reference) on the log-probabilities and values the same weights give with the LM and reward
// heads: the same parameters, other heads. The actor's inference and generation (its rollouts)
// give the LM head's logits and tokens, the critic's inference the reward head's values.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "parallel/comm/loopback_communicator.h"
#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/generate/generator.h"
#include "runtime/plan/model_loader.h"
#include "runtime/rlhf/ppo_math.h"
#include "runtime/worker/trainer.h"

namespace ds::rlhf {
namespace {

constexpr int64_t kB = 4, kT = 8, kV = 16;

std::string Yaml() {
  return "train_batch_size: 4\ntrain_micro_batch_size_per_gpu: 4\n"
         "optimizer: {type: AdamW, params: {lr: 0.001}}\nzero_optimization: {stage: 1}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, "
         "max_seq_len: 8}\ndata: {seq_len: 8}\ntraining: {train_iters: 5}\n"
         "device: {type: cpu, threads: 1}\n";
}

StatusOr<std::unique_ptr<worker::Trainer>> WithHead(const std::string& head) {
  DS_ASSIGN_OR_RETURN(config::JobConfig c, config::ParseJobConfig(Yaml(), "ppo.yaml"));
  c.model.head = head;
  DS_ASSIGN_OR_RETURN(Graph g, plan::LoadModelGraph(c));
  DS_ASSIGN_OR_RETURN(auto t, worker::Trainer::Create(c, std::move(g)));
  DS_RETURN_IF_ERROR(t->Initialize());
  return t;
}

// The batch: fixed tokens; targets the next token (the last position repeats its own).
struct Batch {
  std::vector<int32_t> ids, targets;
  std::vector<int32_t> ends;  // the reward head's scored positions (the last one)
  Batch() {
    for (int64_t i = 0; i < kB * kT; ++i) ids.push_back(static_cast<int32_t>((i * 5 + 3) % kV));
    for (int64_t i = 0; i < kB * kT; ++i) targets.push_back(i % kT + 1 < kT ? ids[i + 1] : ids[i]);
    for (int64_t i = 0; i < kB * kT; ++i) ends.push_back(i % kT == kT - 1);
  }
};

// A batch source that writes its batch and the per-token inputs.
class PpoSource final : public data::BatchSource {
 public:
  PpoSource(const Batch& b, std::map<Tensor*, std::vector<float>> inputs)
      : b_(b), inputs_(std::move(inputs)) {}
  Status Next(int32_t* ids, int32_t* targets) override {
    std::copy(b_.ids.begin(), b_.ids.end(), ids);
    std::copy(b_.targets.begin(), b_.targets.end(), targets);
    for (auto& [t, v] : inputs_) std::copy(v.begin(), v.end(), t->f32());
    return OkStatus();
  }

 private:
  const Batch& b_;
  std::map<Tensor*, std::vector<float>> inputs_;
};

TEST_CASE("PPO heads: the actor's and the critic's losses through the Trainer", "[rlhf][ppo]") {
  const Batch batch;
  PpoBatch p{kB, kT, 3, std::vector<float>(kB * kT, 0.f)};
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = p.start; t < p.start + 1 + b; ++t) p.mask[b * kT + t] = 1.f;
  std::mt19937 rng(9);
  std::normal_distribution<float> noise(0.f, 0.3f);
  PpoSettings s;
  // The LM head's log-probabilities of the targets, and the reward head's values.
  auto lm = WithHead("lm");
  INFO(lm.status().ToString());
  REQUIRE(lm.ok());
  auto ex = (*lm)->MakeInferenceExecutor(kB, kT);
  REQUIRE(ex.ok());
  std::copy(batch.ids.begin(), batch.ids.end(), (*ex)->ids());
  std::copy(batch.targets.begin(), batch.targets.end(), (*ex)->targets());
  REQUIRE((*ex)->Forward(0).ok());
  const float* logits = (*ex)->TensorData((*ex)->graph().FindTensor("logits"), false).f32();
  std::vector<float> logp(kB * kT), old(kB * kT), adv(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    double total = 0;
    for (int64_t j = 0; j < kV; ++j) total += std::exp(double(logits[i * kV + j]));
    logp[i] = static_cast<float>(logits[i * kV + batch.targets[i]] - std::log(total));
    old[i] = logp[i] + noise(rng);
    adv[i] = 2 * noise(rng);
  }
  auto actor = WithHead("ppo_actor");
  INFO(actor.status().ToString());
  REQUIRE(actor.ok());
  {
    // The actor reads and generates from its weights as the LM head does (the hybrid engine's
    // rollouts): the same logits, the same greedy tokens.
    auto aex = (*actor)->MakeInferenceExecutor(kB, kT);
    REQUIRE(aex.ok());
    std::copy(batch.ids.begin(), batch.ids.end(), (*aex)->ids());
    std::copy(batch.targets.begin(), batch.targets.end(), (*aex)->targets());
    REQUIRE((*aex)->Forward(0).ok());
    const float* al = (*aex)->TensorData((*aex)->graph().FindTensor("logits"), false).f32();
    for (int64_t i = 0; i < kB * kT * kV; ++i) REQUIRE(al[i] == logits[i]);
    std::vector<std::vector<int32_t>> tokens[2];
    int k = 0;
    for (worker::Trainer* t : {lm->get(), actor->get()}) {
      auto gen = t->MakeGenerator(2, kT);
      REQUIRE(gen.ok());
      generate::GenerateRequest r;
      r.prompts = {{1, 2, 3}, {4}};
      r.max_new_tokens = 4;
      auto out = (*gen)->Generate(r);
      REQUIRE(out.ok());
      tokens[k++] = out->tokens;
    }
    CHECK(tokens[0] == tokens[1]);
  }
  Tensor o = *(*actor)->StateInput("ppo.old_logprobs"), a = *(*actor)->StateInput("ppo.advantages"),
         m = *(*actor)->StateInput("ppo.mask");
  PpoSource actor_source(batch, {{&o, old}, {&a, adv}, {&m, p.mask}});
  (*actor)->SetBatchSource(&actor_source);
  auto step = (*actor)->TrainStep();
  REQUIRE(step.ok());
  const std::vector<double> adv_d(adv.begin(), adv.end());
  CHECK(step->loss == Approx(ActorLoss(p, s, logp, old, adv_d)).margin(1e-5));
  CHECK(step->grad_norm > 0);
  CHECK_FALSE((*actor)->StateInput("ppo.returns").ok());
  // The critic against the reward head's values.
  auto reward = WithHead("reward");
  INFO(reward.status().ToString());
  REQUIRE(reward.ok());
  auto rex = (*reward)->MakeInferenceExecutor(kB, kT);
  REQUIRE(rex.ok());
  std::copy(batch.ids.begin(), batch.ids.end(), (*rex)->ids());
  std::copy(batch.ends.begin(), batch.ends.end(), (*rex)->targets());
  REQUIRE((*rex)->Forward(0).ok());
  const float* v = (*rex)->TensorData((*rex)->graph().FindTensor("values"), false).f32();
  std::vector<float> values(v, v + kB * kT), old_values(kB * kT), returns(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    old_values[i] = values[i] + noise(rng);
    returns[i] = values[i] + 2 * noise(rng);
  }
  auto critic = WithHead("ppo_critic");
  INFO(critic.status().ToString());
  REQUIRE(critic.ok());
  {
    auto cex = (*critic)->MakeInferenceExecutor(kB, kT);  // the critic's values at rollout time
    REQUIRE(cex.ok());
    std::copy(batch.ids.begin(), batch.ids.end(), (*cex)->ids());
    REQUIRE((*cex)->Forward(0).ok());
    const float* cv = (*cex)->TensorData((*cex)->graph().FindTensor("values"), false).f32();
    for (int64_t i = 0; i < kB * kT; ++i) REQUIRE(cv[i] == values[i]);
  }
  Tensor ov = *(*critic)->StateInput("ppo.old_values"), r = *(*critic)->StateInput("ppo.returns");
  Batch masked = batch;  // the critic's targets: the answer mask
  for (int64_t i = 0; i < kB * kT; ++i) masked.targets[i] = p.mask[i] != 0;
  PpoSource critic_source(masked, {{&ov, old_values}, {&r, returns}});
  (*critic)->SetBatchSource(&critic_source);
  step = (*critic)->TrainStep();
  REQUIRE(step.ok());
  const std::vector<double> ret_d(returns.begin(), returns.end());
  CHECK(step->loss == Approx(CriticLoss(p, s, values, old_values, ret_d)).margin(1e-5));
}

}  // namespace
}  // namespace ds::rlhf
