// Mixture of experts through the trainer: GPT-2 (DeepSpeed-MoE, with and without its residual
// PR-MoE) and Llama (Mixtral's top-2 SwiGLU experts) train on one rank, and data parallelism
// over ranks as threads reproduces the single-rank curve under ZeRO 0-3 (every rank holds every
// expert: the expert-data-parallel group is the data-parallel group); expert parallelism, where
// each rank holds its experts only, reproduces ep 1.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

// Global batch 8 of `micro` sequences per rank; model.moe gets `moe`.
std::string MoeJob(const std::string& data, const std::string& family, int micro, int stage,
                   const std::string& moe, int layers = 2) {
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
         family + ", n_layer: " + std::to_string(layers) + ", n_embd: 32, n_head: 4, " +
         (family == "llama" ? "n_kv_head: 2, " : "") + "vocab_size: 32, max_seq_len: 16, moe: {" +
         moe +
         "}}\n"
         "data: {train: " +
         data + ", validation: " + data +
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
    // E sum_e me_e ce_e: 1 when balanced, E when every token picks one expert.
    for (double a : run.aux) CHECK((a >= 0.99 && a < 4.0));
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

// Pipeline parallelism: each stage adds its own MoE layers' aux terms to its objective (their
// gradient is the constant coefficient) and the loss reduction sums the stages' parts, so the
// loss, the aux loss and the gradients are the single rank's at every pipeline layout, with
// stages that hold no MoE layer (expert_interval 2 at 4 stages) and under ZeRO and TP.
TEST_CASE("MoE: pipeline parallelism reproduces the single-rank curve", "[worker][moe][pipe]") {
  const std::string data = testing::WriteTinyTokens("moe_pipe.tok");
  const std::string moe =
      "num_experts: 4, top_k: 2, drop_tokens: false, top2_2nd_expert_sampling: false";
  struct Layout {
    const char* name;
    const char* parallel;
    int world, stage, tp;
  };
  const Layout layouts[] = {
      {"PP 2", "parallel: {pipeline: 2}\n", 2, 0, 0},
      {"PP 4", "parallel: {pipeline: 4}\n", 4, 0, 0},
      {"PP 2 x DP 2, ZeRO-1", "parallel: {pipeline: 2}\n", 4, 1, 0},
      {"PP 2 x TP 2", "parallel: {pipeline: 2}\n", 4, 0, 2},
      {"PP 2 x DP 2 x EP 2, ZeRO-2", "parallel: {pipeline: 2, expert: 2}\n", 4, 2, 0},
      {"PP 2 x DP 4 x EP 2, ZeRO-1", "parallel: {pipeline: 2, expert: 2}\n", 8, 1, 0},
      {"PP 2 x 2 chunks",
       "parallel: {pipeline: 2}\npipeline: {schedule: interleaved, virtual_stages: 2}\n", 2, 0, 0},
  };
  for (const std::string extra : {"", ", expert_interval: 2, use_residual: true"}) {
    const testing::TrainRun single =
        testing::TrainRanks(MoeJob(data, "gpt2", 2, 0, moe + extra, 4), 1, 0, 20);
    REQUIRE(single.aux.front() > 0.9);
    for (const Layout& l : layouts) {
      if (l.tp > 1 && !extra.empty()) continue;  // PR-MoE's shared input: no TP (tp_graph.h)
      INFO(l.name << extra);
      const testing::TrainRun run = testing::TrainRanks(
          MoeJob(data, "gpt2", 2, l.stage, moe + extra, 4) + l.parallel, l.world, l.tp, 20);
      testing::CheckClose(single.loss, run.loss, 1e-6, "loss");
      testing::CheckClose(single.aux, run.aux, 1e-6, "aux loss");
      testing::CheckClose(single.norm, run.norm, 1e-5, "grad norm");
    }
  }
  // EP x TP x PP: each tp rank routes its chunk of the tokens. Without the aux loss in the
  // objective the steps are the single rank's; with it, each chunk's aux loss is its own (as in
  // DeepSpeed) and the loss metric is the loss plus coeff x the layers' aux losses averaged
  // over the chunks: at the first step the cross-entropy part is the single rank's.
  for (const std::string coeff : {"0.0", "0.01"}) {
    const std::string m = moe + ", moe_loss_coeff: " + coeff;
    const testing::TrainRun one = testing::TrainRanks(MoeJob(data, "gpt2", 2, 0, m, 4), 1, 0, 20);
    const testing::TrainRun run = testing::TrainRanks(
        MoeJob(data, "gpt2", 2, 0, m, 4) + "parallel: {pipeline: 2, expert: 2}\n", 8, 2, 20);
    INFO("PP 2 x TP 2 x DP 2 x EP 2, moe_loss_coeff " << coeff);
    if (coeff == "0.0") {
      testing::CheckClose(one.loss, run.loss, 1e-5, "loss");
      testing::CheckClose(one.norm, run.norm, 1e-4, "grad norm");
    } else {
      const double c = 0.01 * 4;  // 4 MoE layers
      CHECK(run.loss[0] - c * run.aux[0] == Approx(one.loss[0] - c * one.aux[0]).epsilon(1e-6));
      CHECK(run.aux[0] != Approx(one.aux[0]).epsilon(1e-4));  // the chunks' own
    }
  }
  const testing::TrainRun single =
      testing::TrainRanks(MoeJob(data, "llama", 2, 0, moe, 4), 1, 0, 20);
  const testing::TrainRun run = testing::TrainRanks(
      MoeJob(data, "llama", 2, 2, moe, 4) + "parallel: {pipeline: 2}\n", 4, 0, 20);
  INFO("llama PP 2 x DP 2, ZeRO-2");
  testing::CheckClose(single.loss, run.loss, 1e-5, "loss");
  testing::CheckClose(single.aux, run.aux, 1e-5, "aux loss");
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// Expert parallelism: the ranks of each ep group split the experts and exchange tokens with
// all-to-alls; at every ep degree the steps are those of ep 1 (the same micro-batches and
// routing), with drops and without (the capacity then agreed over the ep group), and under ZeRO.
TEST_CASE("MoE: expert parallelism 2 and 4 reproduces ep 1", "[worker][moe][ep]") {
  const std::string data = testing::WriteTinyTokens("moe_ep.tok");
  const char* moes[] = {
      "num_experts: 4, top_k: 2, drop_tokens: false",
      "num_experts: 4, top_k: 1, capacity_factor: 1.0",
  };
  for (const char* moe : moes) {
    const std::string base = MoeJob(data, "gpt2", 2, 0, moe);
    const testing::TrainRun ep1 = testing::TrainRanks(base, 4, 0, 20);
    for (int ep : {2, 4}) {
      INFO(moe << ", ep " << ep);
      const testing::TrainRun run =
          testing::TrainRanks(base + "parallel: {expert: " + std::to_string(ep) + "}\n", 4, 0, 20);
      testing::CheckClose(ep1.loss, run.loss, 1e-6, "loss");
      testing::CheckClose(ep1.aux, run.aux, 1e-6, "aux loss");
      testing::CheckClose(ep1.norm, run.norm, 1e-5, "grad norm");
      CHECK(ep1.eval > 0);
      CHECK(run.eval == Approx(ep1.eval).epsilon(1e-5));  // validation runs the all-to-alls too
      // Each rank holds its experts only; generation gathers the whole model back.
      CHECK(run.elements < ep1.elements);
      CHECK(run.whole_loss == Approx(ep1.whole_loss).epsilon(1e-5));
    }
  }
  const std::string llama = MoeJob(data, "llama", 2, 2, "num_experts: 4, top_k: 2");
  const testing::TrainRun ep1 = testing::TrainRanks(llama, 4, 0, 20);
  for (int ep : {2, 4})
    for (int stage : {1, 2, 3}) {
      INFO("llama, ep " << ep << " x edp " << 4 / ep << ", ZeRO " << stage);
      std::string yaml = MoeJob(data, "llama", 2, stage, "num_experts: 4, top_k: 2");
      const testing::TrainRun run =
          testing::TrainRanks(yaml + "parallel: {expert: " + std::to_string(ep) + "}\n", 4, 0, 20);
      testing::CheckClose(ep1.loss, run.loss, 1e-6, "loss");
      testing::CheckClose(ep1.norm, run.norm, 1e-5, "grad norm");
      CHECK(run.whole_loss == Approx(ep1.whole_loss).epsilon(1e-5));
    }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// Tensor parallelism on the dense layers: every tp rank runs the MoE MLPs whole (replicated
// experts), so TP 2 follows TP 1.
TEST_CASE("MoE: tensor parallelism 2 on the dense layers reproduces one rank",
          "[worker][moe][tp]") {
  const std::string data = testing::WriteTinyTokens("moe_tp.tok");
  const std::string moe = "num_experts: 4, top_k: 2, drop_tokens: false";
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const testing::TrainRun one = testing::TrainRanks(MoeJob(data, family, 8, 0, moe), 1, 0, 20);
    const testing::TrainRun tp = testing::TrainRanks(MoeJob(data, family, 8, 1, moe), 2, 2, 20);
    testing::CheckClose(one.loss, tp.loss, 1e-5, "loss");
  }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// Checkpoints under expert parallelism hold each expert once, with its global id (stage 0: the
// first rank of each edp group writes its experts, dp rank 0 the rest), so they resume at any ep,
// dp and stage on the same curve.
TEST_CASE("MoE: expert-parallel checkpoints resume at another ep and stage", "[worker][moe][ep]") {
  const std::string data = testing::WriteTinyTokens("moe_ckpt.tok");
  const std::string moe = "num_experts: 4, top_k: 2, drop_tokens: false";
  const testing::TrainRun whole = testing::TrainRanks(MoeJob(data, "llama", 2, 0, moe), 4, 0, 20);
  const std::vector<double> want(whole.loss.begin() + 10, whole.loss.end());
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (int stage : {0, 2}) {
    INFO("saved at ep 2, ZeRO " << stage);
    const std::string dir =
        std::string(tmp ? tmp : "/tmp") + "/moe_ep_ckpt" + std::to_string(stage);
    std::filesystem::remove_all(dir);
    std::string save = MoeJob(data, "llama", 2, stage, moe) + "parallel: {expert: 2}\n" +
                       "checkpoint: {dir: " + dir + "}\n";
    save.replace(save.find("train_iters: 20"), 15, "train_iters: 10");
    testing::TrainRanks(save, 4, 0, 10, /*save=*/true);
    const std::string load = "checkpoint: {dir: " + dir + ", load: latest}\n";
    testing::CheckClose(want,
                        testing::TrainRanks(MoeJob(data, "llama", 2, 1, moe) + load, 4, 0, 10).loss,
                        1e-5, "resumed at ep 1, ZeRO 1");
    testing::CheckClose(
        want,
        testing::TrainRanks(MoeJob(data, "llama", 2, 3, moe) + "parallel: {expert: 4}\n" + load, 4,
                            0, 10)
            .loss,
        1e-5, "resumed at ep 4, ZeRO 3");
  }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// Expert parallelism beside tensor parallelism: each tp rank routes 1 / tp of the tokens
// (DeepSpeed drops the duplicates) and the chunks are all-gathered after the combine. Without
// drops and without the aux loss in the objective (each chunk's aux loss is its own, as in
// DeepSpeed), the steps are the single rank's.
TEST_CASE("MoE: expert parallelism with tensor parallelism reproduces one rank",
          "[worker][moe][ep][tp]") {
  const std::string data = testing::WriteTinyTokens("moe_ep_tp.tok");
  const std::string moe =
      "num_experts: 4, top_k: 2, drop_tokens: false, top2_2nd_expert_sampling: false, "
      "moe_loss_coeff: 0.0";
  for (const char* family : {"gpt2", "llama"}) {
    const testing::TrainRun one = testing::TrainRanks(MoeJob(data, family, 4, 0, moe), 1, 0, 20);
    const int layouts[][3] = {{4, 0, 2}, {4, 3, 2}, {8, 2, 2}, {8, 1, 4}};  // world, stage, ep
    for (const auto& l : layouts) {
      INFO(family << ": world " << l[0] << " = tp 2 x dp " << l[0] / 2 << ", ep " << l[2]
                  << ", ZeRO " << l[1]);
      const int micro = 8 / (l[0] / 2);
      const std::string yaml = MoeJob(data, family, micro, l[1], moe) +
                               "parallel: {expert: " + std::to_string(l[2]) + "}\n";
      const testing::TrainRun run = testing::TrainRanks(yaml, l[0], 2, 20);
      testing::CheckClose(one.loss, run.loss, 1e-5, "loss");
      testing::CheckClose(one.norm, run.norm, 1e-4, "grad norm");
      for (double a : run.aux) CHECK((a >= 0.99 && a < 4.0));
    }
  }
}

}  // namespace
}  // namespace ds::worker
