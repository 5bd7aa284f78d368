// Pipeline parallelism through the step planner (ranks as threads over the loopback
// communicator): PP = 2 and 4 under 1F1B reproduce the single-rank loss curve and gradient norms
// of GPT-2 (tied embeddings across the first and last stage) and Llama (fp32: 1e-6 relative, the
// same micro-batches), with dropout too (each node keeps the single rank's seed), PP 2 x DP 2
// stays on it with ZeRO-1 and, untied, ZeRO-2 (1e-5), and every rank reports the last stage's
// loss.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <catch2/catch.hpp>

#include "runtime/base/status_macros.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

using Run = testing::TrainRun;
using testing::CheckClose;

Run Train(const std::string& yaml, int world, int steps, bool save = false, int tp = 0) {
  return testing::TrainRanks(yaml, world, tp, steps, save);
}

// The tiny GPT of the trainer tests with 4 layers, micro-batches of `micro`, and `extra`.
std::string Job(const std::string& data, int micro, int stage, const std::string& extra,
                const std::string& family = "gpt2", int layers = 4) {
  std::string yaml = testing::TinyGptJob(data, micro, stage, "cpu", extra);
  const std::string gpt = "family: gpt2, n_layer: 2";
  yaml.replace(yaml.find(gpt), gpt.size(),
               "family: " + family + ", n_layer: " + std::to_string(layers));
  if (family == "llama") yaml.replace(yaml.find("n_head: 4"), 9, "n_head: 4, n_kv_head: 2");
  return yaml;
}

std::string Pipe(int pp) { return "parallel: {pipeline: " + std::to_string(pp) + "}\n"; }

TEST_CASE("PP: 2 and 4 stages (1F1B) reproduce the single-rank GPT-2 curve", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const Run single = Train(Job(data, 2, 0, ""), 1, 20);
  CHECK(single.loss.back() < single.loss.front());
  for (int pp : {2, 4}) {
    INFO("pp " << pp);
    const Run run = Train(Job(data, 2, 0, Pipe(pp)), pp, 20);
    CheckClose(single.loss, run.loss, 1e-6, "loss");
    CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  }
}

// Validation under a pipeline: each micro-batch forward through the stages (interleaved chunks
// too), the last stage's losses averaged on every rank: the single rank's validation loss.
TEST_CASE("PP: validation equals the single rank's", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  std::string yaml = Job(data, 2, 1, "");
  yaml.replace(yaml.find(", seq_len: 16"), 13, ", validation: " + data + ", seq_len: 16");
  const Run single = Train(yaml, 1, 5);
  REQUIRE(single.eval > 0);
  const std::string inter =
      "parallel: {pipeline: 2}\npipeline: {schedule: interleaved, virtual_stages: 2}\n";
  for (const std::string& extra : {Pipe(2), Pipe(4), inter}) {
    INFO(extra);
    const Run run = Train(yaml + extra, 4, 5);
    CHECK(std::abs(run.eval - single.eval) <= 1e-5 * single.eval);
  }
  // With tensor parallelism: each chunk's forward all-reduces at its own cuts.
  for (const std::string& extra : {Pipe(2), inter}) {
    INFO("TP 2 x " << extra);
    const Run run = Train(yaml + extra, 4, 5, false, 2);
    CHECK(std::abs(run.eval - single.eval) <= 1e-5 * single.eval);
  }
}

// ZB-H1: each backward split into its input half (sent on at once) and its weight half (run in
// the bubble); the same gradients in the same order as one rank's.
TEST_CASE("PP: zb-h1 (split backward) reproduces the single-rank curves", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const std::string zb = "pipeline: {schedule: zb-h1}\n";
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const Run single = Train(Job(data, 2, 0, "", family), 1, 20);
    for (int pp : {2, 4}) {
      INFO("pp " << pp);
      const Run run = Train(Job(data, 2, 0, zb + Pipe(pp), family), pp, 20);
      CheckClose(single.loss, run.loss, 1e-6, "loss");
      CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
    }
    const Run dp = Train(Job(data, 2, 1, zb + Pipe(2), family), 4, 20);
    CheckClose(single.loss, dp.loss, 1e-5, "loss at PP 2 x DP 2, ZeRO-1");
  }
  std::string yaml = Job(data, 2, 0, zb + Pipe(2));
  yaml.replace(yaml.find("max_seq_len: 16}"), 16, "max_seq_len: 16, dropout: 0.1}");
  const Run a = Train(yaml, 2, 10), b = Train(yaml, 2, 10);
  CHECK(a.loss == b.loss);
}

// Interleaved 1F1B: each rank holds 2 model chunks (virtual stages r and r + 2), their
// parameters in one store and one ZeRO plan, each chunk run by its own executors.
TEST_CASE("PP: interleaved (2 ranks x 2 chunks) reproduces the single-rank curves",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const std::string interleaved =
      "parallel: {pipeline: 2}\npipeline: {schedule: interleaved, virtual_stages: 2}\n";
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const Run single = Train(Job(data, 2, 0, "", family), 1, 20);
    const Run run = Train(Job(data, 2, 0, interleaved, family), 2, 20);
    CheckClose(single.loss, run.loss, 1e-6, "loss");
    CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
    const Run dp = Train(Job(data, 2, 1, interleaved, family), 4, 20);
    CheckClose(single.loss, dp.loss, 1e-5, "loss at PP 2 x DP 2, ZeRO-1");
  }
  // PP 4 x 2 chunks over 8 blocks (m = 4, the least).
  const Run single8 = Train(Job(data, 2, 0, "", "gpt2", 8), 1, 10);
  const std::string four =
      "parallel: {pipeline: 4}\npipeline: {schedule: interleaved, virtual_stages: 2}\n";
  const Run run8 = Train(Job(data, 2, 0, four, "gpt2", 8), 4, 10);
  CheckClose(single8.loss, run8.loss, 1e-6, "loss at PP 4 x 2 chunks");
  CheckClose(single8.norm, run8.norm, 1e-5, "gradient norm at PP 4 x 2 chunks");
}

// Recompute inside a pipeline: each chunk's backward runs its blocks' forwards again, its own
// segments (interleaved: per chunk); the same arithmetic as keeping the activations, so the
// losses are bit for bit those without recompute, with dropout too (the recompute draws the
// forward's masks). With TP, partition_activations keeps the block inputs as 1/tp slices.
TEST_CASE("PP: recompute full and selective give the losses of none, bit for bit",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  std::string yaml = Job(data, 2, 1, "", "llama");
  yaml.replace(yaml.find("max_seq_len: 16}"), 16, "max_seq_len: 16, dropout: 0.1}");
  const std::string inter =
      "parallel: {pipeline: 2}\npipeline: {schedule: interleaved, virtual_stages: 2}\n";
  auto recompute = [&yaml](const std::string& mode) {
    std::string y = yaml;
    y.replace(y.find("train_iters: 20}"), 16, "train_iters: 20, recompute: " + mode + "}");
    return y;
  };
  for (const std::string& pipe : {Pipe(2), inter}) {
    const Run none = Train(yaml + pipe, 2, 8);
    for (const char* mode : {"full", "selective"}) {
      INFO(pipe << "recompute " << mode);
      const Run re = Train(recompute(mode) + pipe, 2, 8);
      CHECK(re.loss == none.loss);
      CHECK(re.norm == none.norm);
    }
  }
  const Run none = Train(yaml + Pipe(2), 4, 8, false, 2);
  const Run part = Train(
      recompute("full") + Pipe(2) + "activation_checkpointing: {partition_activations: true}\n", 4,
      8, false, 2);
  CHECK(part.loss == none.loss);
  CHECK(part.norm == none.norm);
}

TEST_CASE("PP: Llama (untied) at 2 stages, and with ZeRO-2 at PP 2 x DP 2", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const Run single = Train(Job(data, 2, 0, "", "llama"), 1, 20);
  const Run run = Train(Job(data, 2, 0, Pipe(2), "llama"), 2, 20);
  CheckClose(single.loss, run.loss, 1e-6, "loss");
  CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  const Run zero2 = Train(Job(data, 2, 2, Pipe(2), "llama"), 4, 20);
  CheckClose(single.loss, zero2.loss, 1e-5, "loss at PP 2 x DP 2 ZeRO-2");
  CheckClose(single.norm, zero2.norm, 1e-5, "gradient norm at PP 2 x DP 2 ZeRO-2");
}

TEST_CASE("PP 2 x DP 2: ZeRO-0, 1 and 2 stay on the single-rank curve", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const Run single = Train(Job(data, 2, 0, ""), 1, 20);
  for (int stage : {0, 1, 2}) {
    INFO("stage " << stage);
    const Run run = Train(Job(data, 2, stage, Pipe(2)), 4, 20);
    CheckClose(single.loss, run.loss, 1e-5, "loss");
    CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  }
}

TEST_CASE("PP: dropout draws the single rank's masks; PP 2 repeats itself bit for bit",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  std::string yaml = Job(data, 2, 0, "");
  yaml.replace(yaml.find("max_seq_len: 16}"), 16, "max_seq_len: 16, dropout: 0.1}");
  const Run single = Train(yaml, 1, 10);
  const Run a = Train(yaml + Pipe(2), 2, 10), b = Train(yaml + Pipe(2), 2, 10);
  CHECK(a.loss == b.loss);
  CHECK(a.weights == b.weights);
  CheckClose(single.loss, a.loss, 1e-6, "loss with dropout");
}

// Mixed precision: 16-bit parameters on every stage, fp32 activations between them. fp16 starts
// at a loss scale that overflows: every stage skips the same steps (the overflow flag is
// reduced over the world) and halves the scale alike.
TEST_CASE("PP: bf16, and fp16 with loss scaling, as on one rank", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const std::string bf16 = "bf16: {enabled: true}\n";
  const std::string fp16 = "fp16: {enabled: true, initial_scale_power: 24, loss_scale_window: 4}\n";
  for (const std::string& precision : {bf16, fp16}) {
    for (const char* family : {"gpt2", "llama"}) {
      INFO(precision << family);
      // The tied embedding's two 16-bit gradients (lookup and head) are accumulated over the
      // micro-batches on their own stages and summed after; one rank adds them every
      // micro-batch: the same sum, rounded to 16 bits in another order (a few 1e-5 of the loss
      // per step, 1e-4 by step 20 with bf16's 8-bit mantissa).
      const double rel = std::string(family) == "gpt2" ? 5e-4 : 1e-6;
      const Run single = Train(Job(data, 2, 0, precision, family), 1, 20);
      const Run pp = Train(Job(data, 2, 0, precision + Pipe(2), family), 2, 20);
      CheckClose(single.loss, pp.loss, rel, "loss at PP 2");
      CHECK(single.scale == pp.scale);  // the same steps skipped, the same scales
      const Run dp = Train(Job(data, 2, 1, precision, family), 2, 20);
      const Run both = Train(Job(data, 2, 1, precision + Pipe(2), family), 4, 20);
      CheckClose(dp.loss, both.loss, rel, "loss at PP 2 x DP 2 beside DP 2, ZeRO-1");
      CHECK(dp.scale == both.scale);
      if (precision == fp16) CHECK(both.scale.front() < 0);  // skipped at 2^24
      CHECK(std::count_if(both.scale.begin(), both.scale.end(), [](double x) { return x > 0; }) >=
            5);  // and steps taken
    }
  }
}

// 3D: the stages are cut out of each tp rank's graph, the tp collectives planned inside each
// stage's forward and backward on its own tp group, the links per (dp, tp) column.
TEST_CASE("PP x TP: TP 2 x PP 2 and PP 2 x DP 2 x TP 2 stay on the single-rank curves",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const Run single = Train(Job(data, 2, 0, "", family), 1, 20);
    const Run tp = Train(Job(data, 2, 0, Pipe(2), family), 4, 20, false, 2);
    CheckClose(single.loss, tp.loss, 1e-6, "loss at TP 2 x PP 2");
    CheckClose(single.norm, tp.norm, 1e-5, "gradient norm at TP 2 x PP 2");
    const Run three = Train(Job(data, 2, 1, Pipe(2), family), 8, 20, false, 2);
    CheckClose(single.loss, three.loss, 1e-5, "loss at PP 2 x DP 2 x TP 2, ZeRO-1");
    CheckClose(single.norm, three.norm, 1e-5, "gradient norm at PP 2 x DP 2 x TP 2, ZeRO-1");
    // Interleaved with TP: each chunk runs its part of the stage plan's tp collectives.
    const std::string inter =
        "parallel: {pipeline: 2}\npipeline: {schedule: interleaved, virtual_stages: 2}\n";
    const Run chunks = Train(Job(data, 2, 0, inter, family), 4, 20, false, 2);
    CheckClose(single.loss, chunks.loss, 1e-6, "loss at TP 2 x PP 2 x 2 chunks");
    CheckClose(single.norm, chunks.norm, 1e-5, "gradient norm at TP 2 x PP 2 x 2 chunks");
    // zb-h1 with TP: the input half runs the tp collectives, the weight half none.
    const std::string zb = "pipeline: {schedule: zb-h1}\n";
    const Run split = Train(Job(data, 2, 0, zb + Pipe(2), family), 4, 20, false, 2);
    CheckClose(single.loss, split.loss, 1e-6, "loss at TP 2 x PP 2, zb-h1");
  }
}

// ZeRO-2 with GPT-2's tied embedding: each end stage's dp ranks reduce-scatter their part of
// its gradient every micro-batch; after the last, both stages' shards are summed over one group.
TEST_CASE("PP x DP x TP: ZeRO-2 with a tied embedding stays on the single-rank curve",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const Run single = Train(Job(data, 2, 0, ""), 1, 20);
  const Run four = Train(Job(data, 2, 2, Pipe(4)), 8, 20);
  CheckClose(single.loss, four.loss, 1e-5, "loss at PP 4 x DP 2, ZeRO-2");
  CheckClose(single.norm, four.norm, 1e-5, "gradient norm at PP 4 x DP 2, ZeRO-2");
  const Run three = Train(Job(data, 2, 2, Pipe(2)), 8, 20, false, 2);
  CheckClose(single.loss, three.loss, 1e-5, "loss at PP 2 x DP 2 x TP 2, ZeRO-2");
  CheckClose(single.norm, three.norm, 1e-5, "gradient norm at PP 2 x DP 2 x TP 2, ZeRO-2");
  // Saved at PP 2 x DP 2 (the embedding's shards from the first stage): resumed bit for bit at
  // the same layout, and on the curve at PP 1 x DP 4.
  const std::string job = Job(data, 2, 2, "");
  const Run whole = Train(job + Pipe(2), 4, 20);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/pipe_zero2_ckpt";
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  std::string save = job + Pipe(2) + "checkpoint: {dir: " + dir + "}\n";
  save.replace(save.find("train_iters: 20"), 15, "train_iters: 10");
  Train(save, 4, 10, /*save=*/true);
  const std::string resume = job + "checkpoint: {dir: " + dir + ", load: latest}\n";
  CHECK(Train(resume + Pipe(2), 4, 10).loss ==
        std::vector<double>(whole.loss.begin() + 10, whole.loss.end()));
  CheckClose(std::vector<double>(single.loss.begin() + 10, single.loss.end()),
             Train(resume, 4, 10).loss, 1e-5, "resumed at PP 1 x DP 4");
}

// ZeRO-Infinity's optimizer swapper per stage: each rank swaps its own stage's shard of the
// optimizer states through its own files; the same numbers as keeping them in memory.
TEST_CASE("PP: offload_optimizer nvme gives the numbers of no offload", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string swap = std::string(tmp ? tmp : "/tmp") + "/pipe_swap";
  REQUIRE(std::system(("rm -rf '" + swap + "' && mkdir -p '" + swap + "'").c_str()) == 0);
  for (int stage : {1, 2}) {
    INFO("ZeRO-" << stage);
    std::string nvme = Job(data, 2, stage, Pipe(2));
    const std::string key = "reduce_bucket_size: 3000";
    nvme.replace(nvme.find(key), key.size(),
                 key + ", sub_group_size: 2000, offload_optimizer: {device: nvme, nvme_path: " +
                     swap + ", buffer_count: 4}");
    const Run memory = Train(Job(data, 2, stage, Pipe(2)), 4, 10);
    const Run swapped = Train(nvme, 4, 10);
    CHECK(swapped.loss == memory.loss);
    CHECK(swapped.norm == memory.norm);
  }
}

// Sequence parallelism inside the stages: norms and dropout on token chunks, each tp rank sending
// its chunk of the residual stream to the same tp rank of the next stage; the numbers of tensor
// parallelism alone.
TEST_CASE("PP x TP: sequence parallelism equals tensor parallelism alone", "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const std::string sp = "parallel: {pipeline: 2, sequence_parallel: true}\n";
  const std::string inter =
      "parallel: {pipeline: 2, sequence_parallel: true}\n"
      "pipeline: {schedule: interleaved, virtual_stages: 2}\n";
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const Run tp = Train(Job(data, 2, 0, Pipe(2), family), 4, 20, false, 2);
    const Run run = Train(Job(data, 2, 0, sp, family), 4, 20, false, 2);
    CheckClose(tp.loss, run.loss, 1e-6, "loss at TP 2 x PP 2 with sequence parallelism");
    CheckClose(tp.norm, run.norm, 1e-5, "gradient norm with sequence parallelism");
    const Run chunks = Train(Job(data, 2, 1, inter, family), 8, 20, false, 2);
    CheckClose(tp.loss, chunks.loss, 1e-5, "loss at PP 2 x DP 2 x TP 2, SP, 2 chunks, ZeRO-1");
  }
}

// Checkpoints per stage: every rank writes its parts as ranges of the whole parameters (the tied
// embedding once, from the first stage), so a PP 2 x DP 2 save resumes at the same layout bit
// for bit and at PP 1 x DP 4, PP 4, TP 2 x PP 2 and one rank on the curve, no conversion step;
// a PP 2 x DP 2 x TP 2 save resumes on one rank.
TEST_CASE("PP: a PP 2 x DP 2 checkpoint resumes at PP 1 x DP 4, PP 4, TP 2 x PP 2, one rank",
          "[worker][pipe]") {
  const std::string data = testing::WriteTinyTokens("pipe_train.tok");
  const std::string job = Job(data, 2, 1, "");
  const Run single = Train(Job(data, 2, 0, ""), 1, 20);
  const Run whole = Train(job + Pipe(2), 4, 20);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/pipe_ckpt";
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  std::string save = job + Pipe(2) + "checkpoint: {dir: " + dir + "}\n";
  save.replace(save.find("train_iters: 20"), 15, "train_iters: 10");
  Train(save, 4, 10, /*save=*/true);
  const std::string resume = job + "checkpoint: {dir: " + dir + ", load: latest}\n";
  const std::vector<double> want(single.loss.begin() + 10, single.loss.end());
  const Run same = Train(resume + Pipe(2), 4, 10);
  CHECK(same.loss == std::vector<double>(whole.loss.begin() + 10, whole.loss.end()));
  CheckClose(want, Train(resume, 4, 10).loss, 1e-5, "resumed at PP 1 x DP 4");
  CheckClose(want, Train(resume + Pipe(4), 4, 10).loss, 1e-5, "resumed at PP 4");
  CheckClose(want, Train(resume, 1, 10).loss, 1e-5, "resumed on one rank");
  CheckClose(want, Train(resume + Pipe(2), 4, 10, false, 2).loss, 1e-5, "resumed at TP 2 x PP 2");
  // Saved at PP 2 x DP 2 x TP 2, resumed on one rank.
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  Train(save, 8, 10, /*save=*/true, 2);
  CheckClose(want, Train(resume, 1, 10).loss, 1e-5, "saved at PP 2 x DP 2 x TP 2, resumed at 1");
}

}  // namespace
}  // namespace ds::worker
