// DeepSpeed-Chat's step 2 on the engine: a GPT-2 with the reward head (model.head: reward, a
// value per position and reward_pair_loss) trained through the Trainer on in-memory pairs
// (ExampleBatches) reaches at least 95% pairwise accuracy on held-out pairs of a synthetic
// preference: the chosen answer repeats the prompt's digits, the rejected one does not. Data
// parallelism over 2 ranks (each its half of the pairs) at ZeRO-2 gives the single rank's
// losses: every pair's loss is its own, so the mean over the pairs is the mean over the ranks.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/data/addition_task.h"
#include "runtime/exec/executor.h"
#include "runtime/rlhf/example_batches.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::rlhf {
namespace {

// "123=" -> chosen "123", rejected three other digits (never the same string).
std::vector<PreferenceExample> CopyPreference(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto digits = [&rng] {
    std::string s;
    for (int i = 0; i < 3; ++i) s += static_cast<char>('0' + rng() % 10);
    return s;
  };
  std::vector<PreferenceExample> out;
  for (int i = 0; i < n; ++i) {
    PreferenceExample e;
    e.chosen = digits();
    e.prompt = e.chosen + "=";
    do e.rejected = digits();
    while (e.rejected == e.chosen);
    e.has_rejected = true;
    out.push_back(e);
  }
  return out;
}

Encoding AdditionChars() {
  Encoding e;
  e.encode = [](const std::string& s) { return data::AdditionStringToTokens(s); };
  e.end = {data::kAdditionEnd};
  e.pad = data::kAdditionPad;
  e.seq = 8;
  return e;
}

std::vector<std::vector<TokenExample>> Pairs(const std::vector<PreferenceExample>& rows) {
  std::vector<std::vector<TokenExample>> out;
  for (const PreferenceExample& e : rows) {
    auto p = RewardPair(e, AdditionChars());
    REQUIRE(p.ok());
    out.push_back(*p);
  }
  return out;
}

const char* kAdamW = "{type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}";
const char* kSgd = "{type: SGD, params: {lr: 0.3, momentum: 0.9}}";

std::string Job(int micro, const char* optimizer = kAdamW) {
  return "train_batch_size: 32\ntrain_micro_batch_size_per_gpu: " + std::to_string(micro) +
         "\ngradient_clipping: 1.0\noptimizer: " + optimizer +
         "\n"
         "zero_optimization: {stage: 2}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 14, "
         "max_seq_len: 8, head: reward}\n"
         "data: {seq_len: 8}\ntraining: {train_iters: 400}\ndevice: {type: cpu, threads: 1}\n";
}

// The share of held-out pairs whose chosen answer scores above the rejected one.
StatusOr<double> Accuracy(worker::Trainer& t, const std::vector<std::vector<TokenExample>>& held) {
  const int64_t pairs = 16;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> ex, t.MakeInferenceExecutor(2 * pairs, 8));
  const int values = ex->graph().FindTensor("values");
  int64_t right = 0, total = 0;
  for (size_t first = 0; first + pairs <= held.size(); first += pairs) {
    for (int64_t i = 0; i < pairs; ++i)
      for (int s = 0; s < 2; ++s) {
        const TokenExample& r = held[first + i][s];
        std::copy(r.ids.begin(), r.ids.end(), ex->ids() + (s * pairs + i) * 8);
        std::copy(r.targets.begin(), r.targets.end(), ex->targets() + (s * pairs + i) * 8);
      }
    DS_RETURN_IF_ERROR(ex->Forward(0));
    const float* v = ex->TensorData(values, false).f32();
    for (int64_t i = 0; i < pairs; ++i) {
      const TokenExample &c = held[first + i][0], &r = held[first + i][1];
      const int64_t ce = std::find(c.targets.begin(), c.targets.end(), 1) - c.targets.begin();
      const int64_t re = std::find(r.targets.begin(), r.targets.end(), 1) - r.targets.begin();
      right += v[i * 8 + ce] > v[(pairs + i) * 8 + re];
      ++total;
    }
  }
  return static_cast<double>(right) / total;
}

TEST_CASE("Reward model: pairwise accuracy on held-out pairs, and DP 2 on the curve",
          "[rlhf][reward]") {
  const auto train = Pairs(CopyPreference(4096, 1)), held = Pairs(CopyPreference(256, 2));
  std::vector<double> single;
  double before = 0, after = 0;
  std::vector<Status> errors = testing::OnRanks(1, [&](int, parallel::Communicator* comm) {
    DS_ASSIGN_OR_RETURN(auto t, testing::MakeTrainer(Job(32), comm));
    DS_RETURN_IF_ERROR(t->Initialize());
    DS_ASSIGN_OR_RETURN(auto batches, ExampleBatches::Create(train, {32, 2, 5, 0, 1}));
    t->SetBatchSource(&batches);
    DS_ASSIGN_OR_RETURN(before, Accuracy(*t, held));
    for (int i = 0; i < 400; ++i) {
      DS_ASSIGN_OR_RETURN(worker::StepMetrics m, t->TrainStep());
      single.push_back(m.loss);
    }
    DS_ASSIGN_OR_RETURN(after, Accuracy(*t, held));
    return OkStatus();
  });
  INFO(errors[0].ToString());
  REQUIRE(errors[0].ok());
  INFO("accuracy " << before << " -> " << after << ", loss " << single.front() << " -> "
                   << single.back());
  CHECK(std::abs(single.front() - std::log(2.0)) < 0.05);  // untrained: scores alike
  CHECK(after >= 0.95);
  // DP 2, ZeRO-2: 20 steps on the single rank's losses. SGD: Adam's first steps near the
  // untrained model's ln 2 turn the last bits of gradients summed in another order into
  // diverging updates; SGD keeps them last bits.
  std::vector<std::vector<double>> runs(3);  // one rank, then the two DP ranks
  for (int world : {1, 2}) {
    errors = testing::OnRanks(world, [&](int rank, parallel::Communicator* comm) -> Status {
      DS_ASSIGN_OR_RETURN(auto t, testing::MakeTrainer(Job(32 / world, kSgd), comm));
      DS_RETURN_IF_ERROR(t->Initialize());
      DS_ASSIGN_OR_RETURN(auto batches,
                          ExampleBatches::Create(train, {32 / world, 2, 5, rank, world}));
      t->SetBatchSource(&batches);
      for (int i = 0; i < 20; ++i) {
        DS_ASSIGN_OR_RETURN(worker::StepMetrics m, t->TrainStep());
        runs[world - 1 + rank].push_back(m.loss);
      }
      return OkStatus();
    });
    for (const Status& s : errors) {
      INFO(s.ToString());
      REQUIRE(s.ok());
    }
  }
  testing::CheckClose(runs[0], runs[1], 1e-5, "DP 2 loss");
  testing::CheckClose(runs[0], runs[2], 1e-5, "DP 2 loss (rank 1)");
}

}  // namespace
}  // namespace ds::rlhf
