// Left padding through whole models (ModelSpec::pad_mask, RLHF's prompts of several lengths):
// rows left-padded by K tokens, whatever the pads hold, give at their own positions the logits
// the same rows give unpadded in a model K positions shorter, for GPT-2 (learned positions) and
// Llama (RoPE, grouped-query attention); one PPO actor step on the padded rows has the unpadded
// step's loss and gradient norm, and leaves the same weights.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"

namespace ds::rlhf {
namespace {

constexpr int64_t kB = 4, kT = 6, kPad = 3, kV = 16;

StatusOr<std::unique_ptr<worker::Trainer>> Model(const std::string& family, int64_t seq,
                                                 bool pad_mask) {
  const std::string yaml =
      "train_batch_size: 4\ntrain_micro_batch_size_per_gpu: 4\ngradient_clipping: 1.0\n"
      "optimizer: {type: AdamW, params: {lr: 0.01}}\nzero_optimization: {stage: 1}\n"
      "model: {family: " +
      family + ", n_layer: 2, n_embd: 32, n_head: 4, " +
      (family == "llama" ? "n_kv_head: 2, " : "") + "vocab_size: 16, max_seq_len: 16}\n" +
      "data: {seq_len: " + std::to_string(seq) +
      "}\ntraining: {train_iters: 5}\ndevice: {type: cpu, threads: 1}\n";
  DS_ASSIGN_OR_RETURN(config::JobConfig c, config::ParseJobConfig(yaml, family + ".yaml"));
  c.model.head = "ppo_actor";
  c.model.pad_mask = pad_mask;
  DS_ASSIGN_OR_RETURN(Graph g, plan::LoadModelGraph(c));
  DS_ASSIGN_OR_RETURN(auto t, worker::Trainer::Create(c, std::move(g)));
  DS_RETURN_IF_ERROR(t->Initialize());
  return t;
}

// Rows of `seq` tokens: the kT real ones behind `pad` pad tokens (random values).
struct Rows {
  std::vector<int32_t> ids, targets, pads;
  std::vector<float> mask, old, adv;
};

Rows Make(int64_t pad, std::mt19937& rng) {
  std::mt19937 same(7);  // the real tokens and the inputs are the same whatever the padding
  Rows r;
  const int64_t seq = kT + pad;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < pad; ++t) r.ids.push_back(static_cast<int32_t>(rng() % kV));
    for (int64_t t = 0; t < kT; ++t) r.ids.push_back(static_cast<int32_t>(same() % kV));
    r.pads.push_back(static_cast<int32_t>(pad));
  }
  r.targets.assign(kB * seq, 0);
  r.mask.assign(kB * seq, 0.f);
  r.old.assign(kB * seq, 0.f);
  r.adv.assign(kB * seq, 0.f);
  std::normal_distribution<float> noise(0.f, 1.f);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t + 1 < kT; ++t) {
      const int64_t i = b * seq + pad + t;
      r.targets[i] = r.ids[i + 1];
      r.mask[i] = t >= 2 ? 1.f : 0.f;  // the "answer"
      r.old[i] = -2.f + 0.1f * noise(same);
      r.adv[i] = noise(same);
    }
  return r;
}

class Source final : public data::BatchSource {
 public:
  Source(const Rows& r, std::map<std::string, Tensor> in) : r_(r), in_(std::move(in)) {}
  Status Next(int32_t* ids, int32_t* targets) override {
    std::copy(r_.ids.begin(), r_.ids.end(), ids);
    std::copy(r_.targets.begin(), r_.targets.end(), targets);
    std::copy(r_.old.begin(), r_.old.end(), in_.at("ppo.old_logprobs").f32());
    std::copy(r_.adv.begin(), r_.adv.end(), in_.at("ppo.advantages").f32());
    std::copy(r_.mask.begin(), r_.mask.end(), in_.at("ppo.mask").f32());
    if (in_.count(kLeftPads)) std::copy(r_.pads.begin(), r_.pads.end(), in_.at(kLeftPads).i32());
    return OkStatus();
  }

 private:
  const Rows& r_;
  std::map<std::string, Tensor> in_;
};

// The logits [kB, seq, kV] of a forward of `r`.
std::vector<float> Logits(worker::Trainer& t, const Rows& r, int64_t seq) {
  auto ex = t.MakeInferenceExecutor(kB, seq);
  REQUIRE(ex.ok());
  std::copy(r.ids.begin(), r.ids.end(), (*ex)->ids());
  std::copy(r.targets.begin(), r.targets.end(), (*ex)->targets());
  const int pads = (*ex)->graph().FindTensor(kLeftPads);
  if (pads >= 0) std::copy(r.pads.begin(), r.pads.end(), (*ex)->TensorData(pads, false).i32());
  REQUIRE((*ex)->Forward(0).ok());
  const Tensor l = (*ex)->TensorData((*ex)->graph().FindTensor("logits"), false);
  return std::vector<float>(l.f32(), l.f32() + l.numel());
}

void CheckSameRows(const std::vector<float>& padded, const std::vector<float>& alone) {
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t v = 0; v < kV; ++v)
        REQUIRE(padded[((b * (kT + kPad)) + kPad + t) * kV + v] ==
                Approx(alone[(b * kT + t) * kV + v]).margin(2e-5));
}

TEST_CASE("pad mask: left-padded rows compute what they compute alone", "[rlhf][pad]") {
  std::mt19937 rng(3);
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    auto padded = Model(family, kT + kPad, true), alone = Model(family, kT, false);
    INFO(padded.status().ToString() << " " << alone.status().ToString());
    REQUIRE((padded.ok() && alone.ok()));
    const Rows rp = Make(kPad, rng), ra = Make(0, rng);
    CheckSameRows(Logits(**padded, rp, kT + kPad), Logits(**alone, ra, kT));
    // One PPO actor step each: the same loss, gradient norm and resulting weights.
    std::map<std::string, Tensor> in_p, in_a;
    for (const char* n : {"ppo.old_logprobs", "ppo.advantages", "ppo.mask", kLeftPads})
      in_p[n] = *(*padded)->StateInput(n);
    for (const char* n : {"ppo.old_logprobs", "ppo.advantages", "ppo.mask"})
      in_a[n] = *(*alone)->StateInput(n);
    CHECK_FALSE((*alone)->StateInput(kLeftPads).ok());
    Source sp(rp, in_p), sa(ra, in_a);
    (*padded)->SetBatchSource(&sp);
    (*alone)->SetBatchSource(&sa);
    auto step_p = (*padded)->TrainStep();
    auto step_a = (*alone)->TrainStep();
    REQUIRE((step_p.ok() && step_a.ok()));
    CHECK(step_p->loss == Approx(step_a->loss).epsilon(1e-6));
    CHECK(step_p->grad_norm == Approx(step_a->grad_norm).epsilon(1e-5));
    CheckSameRows(Logits(**padded, rp, kT + kPad), Logits(**alone, ra, kT));
  }
}

}  // namespace
}  // namespace ds::rlhf
