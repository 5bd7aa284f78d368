// DeepSpeed-Ulysses through the trainer (ranks as threads): the sp ranks of a group share each
// micro-batch, a time chunk each, with all-to-alls around attention. At SP = 2 and 4, and at
// SP = 2 x DP = 2 under ZeRO-2, the per-step losses follow the single rank's within 1e-6 and the
// gradient norms within 1e-5 (the loss averaged once, the gradients summed once: DeepSpeed's
// issues #5248 and #6841), for GPT-2 (learned positions) and Llama with grouped-query attention
// (RoPE at each chunk's positions).
#include <catch2/catch.hpp>
#include <string>

#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

std::string Job(const std::string& data, const std::string& family, int stage, int sp,
                const std::string& heads = "") {
  return "train_batch_size: 8\n"
         "train_micro_batch_size_per_gpu: 2\n"
         "gradient_clipping: 1.0\n"
         "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
         "zero_optimization: {stage: " +
         std::to_string(stage) +
         ", reduce_bucket_size: 3000}\n"
         "model: {family: " +
         family + ", n_layer: 2, " +
         (!heads.empty()      ? heads
          : family == "llama" ? "n_embd: 32, n_head: 4, n_kv_head: 2, "
                              : "n_embd: 32, n_head: 4, ") +
         "vocab_size: 32, max_seq_len: 16}\n"
         "data: {train: " +
         data + ", validation: " + data +
         ", seq_len: 16, shuffle: true}\n"
         "training: {train_iters: 20}\n"
         "device: {type: cpu, threads: 1}\n" +
         (sp > 1 ? "parallel: {ulysses: " + std::to_string(sp) + "}\n" : "");
}

TEST_CASE("Ulysses: SP 2 and 4 and SP 2 x DP 2 reproduce the single rank", "[worker][ulysses]") {
  const std::string data = testing::WriteTinyTokens("ulysses.tok");
  for (const char* family : {"gpt2", "llama"}) {
    const testing::TrainRun single = testing::TrainRanks(Job(data, family, 0, 1), 1, 0, 20);
    struct Case {
      int world, sp, stage;
    };
    for (Case c : {Case{2, 2, 0}, Case{4, 4, 1}, Case{4, 2, 2}}) {
      INFO(family << ": world " << c.world << ", sp " << c.sp << ", ZeRO " << c.stage);
      const testing::TrainRun run =
          testing::TrainRanks(Job(data, family, c.stage, c.sp), c.world, 0, 20);
      testing::CheckClose(single.loss, run.loss, 1e-6, "loss");
      testing::CheckClose(single.norm, run.norm, 1e-5, "grad norm");
      CHECK(single.eval > 0);
      CHECK(run.eval == Approx(single.eval).epsilon(1e-5));  // validation runs the all-to-alls too
    }
  }
}

// Heads that sp does not divide (kernels/head_split.h): GPT-2's 6 heads over 4 ranks (2, 2, 1, 1,
// DeepSpeed's uneven path), Llama's 3 kv heads over 2 ranks (2 and 1, with their 4 and 2
// queries), and Llama's 2 kv heads over 4 ranks (each shared by 2 ranks, whose gradients sum).
TEST_CASE("Ulysses: uneven and shared heads reproduce the single rank", "[worker][ulysses]") {
  const std::string data = testing::WriteTinyTokens("ulysses_uneven.tok");
  struct Case {
    const char* family;
    const char* heads;
    int sp;
  };
  for (Case c : {Case{"gpt2", "n_embd: 48, n_head: 6, ", 4},
                 Case{"llama", "n_embd: 48, n_head: 6, n_kv_head: 3, ", 2},
                 Case{"llama", "n_embd: 32, n_head: 4, n_kv_head: 2, ", 4}}) {
    INFO(c.family << " " << c.heads << "sp " << c.sp);
    const testing::TrainRun single =
        testing::TrainRanks(Job(data, c.family, 0, 1, c.heads), 1, 0, 20);
    const testing::TrainRun run =
        testing::TrainRanks(Job(data, c.family, 1, c.sp, c.heads), c.sp, 0, 20);
    testing::CheckClose(single.loss, run.loss, 1e-6, "loss");
    testing::CheckClose(single.norm, run.norm, 1e-5, "grad norm");
    CHECK(run.eval == Approx(single.eval).epsilon(1e-5));
  }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// Recompute re-runs a block's forward, its all-to-alls included, before the block's backward:
// the steps are those of keeping everything.
TEST_CASE("Ulysses and expert parallelism with activation recompute", "[worker][ulysses][moe]") {
  const std::string data = testing::WriteTinyTokens("ulysses_recompute.tok");
  for (const char* mode : {"full", "selective"}) {
    INFO("recompute " << mode);
    const std::string sp = Job(data, "llama", 0, 2);
    const testing::TrainRun keep = testing::TrainRanks(sp, 2, 0, 20);
    const testing::TrainRun again = testing::TrainRanks(
        sp.substr(0, sp.find("training:")) + "training: {train_iters: 20, recompute: " + mode +
            "}\n" + sp.substr(sp.find("device:")),
        2, 0, 20);
    testing::CheckClose(keep.loss, again.loss, 1e-6, "loss");
  }
  // PR-MoE's recompute posts its overlapped all-to-all again (parallel/expert/moe_overlap.h).
  for (const char* residual : {"false", "true"}) {
    INFO("use_residual " << residual);
    std::string ep = Job(data, "gpt2", 0, 1);
    ep.replace(ep.find("max_seq_len: 16}"), 16,
               std::string("max_seq_len: 16, moe: {num_experts: 4, top_k: 1, capacity_factor: "
                           "1.0, use_residual: ") +
                   residual + "}}");
    ep += "parallel: {expert: 2}\n";
    const testing::TrainRun keep = testing::TrainRanks(ep, 2, 0, 20);
    const testing::TrainRun again = testing::TrainRanks(
        ep.substr(0, ep.find("training:")) + "training: {train_iters: 20, recompute: full}\n" +
            ep.substr(ep.find("device:")),
        2, 0, 20);
    testing::CheckClose(keep.loss, again.loss, 1e-6, "EP 2 loss");
  }
}

}  // namespace
}  // namespace ds::worker
