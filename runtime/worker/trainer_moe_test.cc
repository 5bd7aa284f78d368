// Mixture of experts through the trainer: GPT-2 (DeepSpeed-MoE, with and without its residual
// PR-MoE) and Llama (Mixtral's top-2 SwiGLU experts) train on one rank, and data parallelism
// over ranks as threads reproduces the single-rank curve under ZeRO 0-3 (every rank holds every
// expert: the expert-data-parallel group is the data-parallel group).
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

// Global batch 8 of `micro` sequences per rank; model.moe gets `moe`.
std::string MoeJob(const std::string& data, const std::string& family, int micro, int stage,
                   const std::string& moe) {
  return "train_batch_size: 8\n"
         "train_micro_batch_size_per_gpu: " +
         std::to_string(micro) +
         "\n"
         "gradient_clipping: 1.0\n"
         "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
         "zero_optimization: {stage: " +
         std::to_string(stage) + ", reduce_bucket_size: 3000" +
         (stage == 3 ? ", stage3_param_persistence_threshold: 100" : "") +
         "}\n"
         "model: {family: " +
         family + ", n_layer: 2, n_embd: 32, n_head: 4, " +
         (family == "llama" ? "n_kv_head: 2, " : "") + "vocab_size: 32, max_seq_len: 16, moe: {" +
         moe +
         "}}\n"
         "data: {train: " +
         data +
         ", seq_len: 16, shuffle: true}\n"
         "training: {train_iters: 20}\n"
         "device: {type: cpu, threads: 1}\n";
}

TEST_CASE("MoE: GPT-2, PR-MoE and Mixtral-style Llama train on one rank", "[worker][moe]") {
  const std::string data = testing::WriteTinyTokens("moe_train.tok");
  const char* cases[][2] = {
      {"gpt2", "num_experts: 4, top_k: 1, capacity_factor: 1.0"},
      {"gpt2", "num_experts: 4, top_k: 2, use_residual: true, expert_interval: 2"},
      {"gpt2", "num_experts: 4, top_k: 1, noisy_gate_policy: RSample, drop_tokens: false"},
      {"llama", "num_experts: 4, top_k: 2, drop_tokens: false"},
  };
  for (const auto& c : cases) {
    INFO(c[0] << " " << c[1]);
    const testing::TrainRun run = testing::TrainRanks(MoeJob(data, c[0], 8, 0, c[1]), 1, 0, 20);
    for (double l : run.loss) REQUIRE(std::isfinite(l));
    CHECK(run.loss.back() < run.loss.front() - 0.3);
  }
}

// Without drops and with the second expert by argmax, routing is a function of the tokens alone,
// so the same micro-batches (2 sequences) give the same steps at any data-parallel degree.
TEST_CASE("MoE: data parallelism reproduces the single-rank curve, ZeRO 0-3", "[worker][moe]") {
  const std::string data = testing::WriteTinyTokens("moe_dp.tok");
  const std::string moe =
      "num_experts: 4, top_k: 2, drop_tokens: false, top2_2nd_expert_sampling: false";
  const testing::TrainRun single = testing::TrainRanks(MoeJob(data, "gpt2", 2, 0, moe), 1, 0, 20);
  for (int world : {2, 4})
    for (int stage : {0, 1, 2, 3}) {
      INFO("dp " << world << " stage " << stage);
      const testing::TrainRun dp =
          testing::TrainRanks(MoeJob(data, "gpt2", 2, stage, moe), world, 0, 20);
      testing::CheckClose(single.loss, dp.loss, 1e-5, "loss");
      testing::CheckClose(single.norm, dp.norm, 1e-4, "grad norm");
    }
}

}  // namespace
}  // namespace ds::worker
