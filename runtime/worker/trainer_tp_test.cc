// Tensor parallelism through the step planner (ranks as threads over the loopback
// communicator): TP = 2 and 4 reproduce the single-rank loss curve and gradient norms of GPT-2
// and Llama with grouped-query attention (fp32, dropout off: 1e-6 relative), dropout follows
// Megatron's rule (the replicated regions' masks are TP = 1's, and TP = 2 repeats itself bit for
// bit), TP = 2 x DP = 2 with ZeRO-1, 2 and 3 stays on the single-rank curve (1e-5), and every
// tp rank's trained weights are its slice of the single rank's.
#include <cmath>
#include <filesystem>
#include <map>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "runtime/base/status_macros.h"
#include "runtime/ckpt/zero_shards.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"
#include "zero/param_store.h"

namespace ds::worker {
namespace {

std::string MakeData() { return testing::WriteTinyTokens("tp_train.tok"); }

using Run = testing::TrainRun;
using testing::CheckClose;

Run Train(const std::string& yaml, int world, int tp, int steps, bool save = false) {
  return testing::TrainRanks(yaml, world, tp, steps, save);
}

// Every parameter of tp rank `rank` (world rank = tp rank at dp 1) against its slice of the
// single rank's.
void CheckSlices(const std::string& yaml, const Run& single, const Run& tp_run, int tp) {
  auto config = config::ParseJobConfig(yaml, "tp.yaml");
  REQUIRE(config.ok());
  auto graph = plan::LoadModelGraph(*config);
  REQUIRE(graph.ok());
  zero::ParamStore full(*graph, DType::kF32);
  for (int rank = 0; rank < tp; ++rank) {
    auto local = parallel::TensorParallelGraph(*graph, tp, rank);
    REQUIRE(local.ok());
    zero::ParamStore mine(local->graph, DType::kF32);
    double worst = 0;
    for (size_t i = 0; i < full.slots().size(); ++i) {
      const zero::ParamSlot& f = full.slots()[i];
      const zero::ParamSlot& m = mine.slots()[i];
      std::vector<float> want(m.numel);
      parallel::TakeShard(local->shards[i], single.weights[0].data() + f.offset, want.data());
      for (int64_t k = 0; k < m.numel; ++k)
        worst = std::max<double>(worst, std::abs(tp_run.weights[rank][m.offset + k] - want[k]));
    }
    // 20 AdamW steps of lr 0.003 move a weight by up to 0.06; m / sqrt(v) amplifies the
    // gradients' last-bit differences where they are small: a few 1e-5 remain. A wrong slice
    // would differ by the weights' own size (0.02 and up).
    INFO("tp " << tp << " rank " << rank << ": largest weight difference " << worst);
    CHECK(worst < 1e-4);
  }
}

std::string WithSpKv(std::string yaml) { return yaml + "parallel: {sequence_parallel: true}\n"; }

std::string Gpt(const std::string& data, int micro, int stage, const std::string& extra = "") {
  return testing::TinyGptJob(data, micro, stage, "cpu", extra);
}

std::string Llama(const std::string& data) {
  std::string yaml = Gpt(data, 8, 0);
  const std::string gpt =
      "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 32, max_seq_len: 16}";
  yaml.replace(yaml.find(gpt), gpt.size(),
               "model: {family: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, "
               "vocab_size: 32, max_seq_len: 16}");
  return yaml;
}

TEST_CASE("TP: 2 and 4 ranks reproduce the single-rank GPT-2 curve, norms and weights",
          "[worker][tp]") {
  const std::string data = MakeData();
  const std::string yaml = Gpt(data, 8, 0);
  const Run single = Train(yaml, 1, 1, 20);
  CHECK(single.loss.back() < single.loss.front());
  for (int tp : {2, 4}) {
    INFO("tp " << tp);
    const Run run = Train(yaml, tp, tp, 20);
    CheckClose(single.loss, run.loss, 1e-6, "loss");
    CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
    CheckSlices(yaml, single, run, tp);
  }
}

TEST_CASE("TP: Llama with grouped-query attention (kv heads split) at 2 ranks", "[worker][tp]") {
  const std::string data = MakeData();
  const std::string yaml = Llama(data);
  const Run single = Train(yaml, 1, 1, 20);
  const Run run = Train(yaml, 2, 2, 20);
  CheckClose(single.loss, run.loss, 1e-6, "loss");
  CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  CheckSlices(yaml, single, run, 2);
}

// tp above the kv heads: each key / value head is replicated over the ranks whose query heads
// read it; their gradients are summed over those ranks (a kv group), counted once in the norm
// and stored once in checkpoints.
TEST_CASE("TP: Llama with fewer kv heads than tp ranks (replicated kv heads)", "[worker][tp]") {
  const std::string data = MakeData();
  std::string yaml = Llama(data);
  yaml.replace(yaml.find("n_head: 4, n_kv_head: 2"), 23, "n_head: 8, n_kv_head: 2");
  const Run single = Train(yaml, 1, 1, 20);
  const Run run = Train(yaml, 4, 4, 20);
  CheckClose(single.loss, run.loss, 1e-6, "loss");
  CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  CheckSlices(yaml, single, run, 4);
  const Run sp = Train(WithSpKv(yaml), 4, 4, 20);
  CheckClose(single.loss, sp.loss, 1e-6, "loss with sequence parallelism");
  // Saved at TP 4 (each shared head written once), resumed at TP 1 and TP 2 (kv heads split).
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/tp_kv_ckpt";
  std::filesystem::remove_all(dir);
  std::string save = yaml + "checkpoint: {dir: " + dir + "}\n";
  save.replace(save.find("train_iters: 20"), 15, "train_iters: 10");
  Train(save, 4, 4, 10, /*save=*/true);
  const std::string resume = yaml + "checkpoint: {dir: " + dir + ", load: latest}\n";
  const std::vector<double> want(single.loss.begin() + 10, single.loss.end());
  CheckClose(want, Train(resume, 1, 1, 10).loss, 1e-5, "resumed at TP 1");
  CheckClose(want, Train(resume, 2, 2, 10).loss, 1e-5, "resumed at TP 2");
}

TEST_CASE("TP: dropout masks of replicated regions are the single rank's; TP 2 repeats itself",
          "[worker][tp]") {
  const std::string data = MakeData();
  std::string yaml = Gpt(data, 8, 0);
  yaml.replace(yaml.find("max_seq_len: 16}"), 16, "max_seq_len: 16, dropout: 0.1}");
  const Run single = Train(yaml, 1, 1, 10);
  const Run a = Train(yaml, 2, 2, 10), b = Train(yaml, 2, 2, 10);
  CHECK(a.loss == b.loss);
  CHECK(a.weights == b.weights);
  CheckClose(single.loss, a.loss, 1e-6, "loss with dropout");
}

TEST_CASE("TP 2 x DP 2: ZeRO-1, 2 and 3 stay on the single-rank curve", "[worker][tp]") {
  const std::string data = MakeData();
  const Run single = Train(Gpt(data, 8, 0), 1, 1, 20);
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    const Run run = Train(Gpt(data, 4, stage), 4, 2, 20);
    CheckClose(single.loss, run.loss, 1e-5, "loss");
    CheckClose(single.norm, run.norm, 1e-5, "gradient norm");
  }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

// A checkpoint written at TP 2 x DP 2 (ZeRO-1: one file per rank, every slice a range of a whole
// parameter) resumes at TP 1, TP 4, DP 4 and TP 2 x DP 2 at stage 2 with no conversion step;
// steps 11-20 continue the single rank's curve, and the same layout continues bit for bit.
TEST_CASE("TP: a TP 2 x DP 2 checkpoint resumes at other tp, dp and stages", "[worker][tp]") {
  const std::string data = MakeData();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/tp_ckpt";
  std::filesystem::remove_all(dir);
  auto job = [&](int micro, int stage, int iters, bool load) {
    std::string yaml = Gpt(data, micro, stage);
    yaml.replace(yaml.find("train_iters: 20"), 15, "train_iters: " + std::to_string(iters));
    return yaml + "checkpoint: {dir: " + dir + (load ? ", load: latest}\n" : "}\n");
  };
  const Run single = Train(Gpt(data, 8, 0), 1, 1, 20);
  const Run whole = Train(job(4, 1, 20, false), 4, 2, 20);  // the same layout, uninterrupted
  Train(job(4, 1, 20, false), 4, 2, 10, /*save=*/true);
  {
    // A row-parallel weight's rows are one strided record per rank and state (a ZeRO segment
    // may cut off a partial first and last row), not one record per row.
    auto reader = ckpt::CheckpointReader::Open(dir);
    REQUIRE(reader.ok());
    std::map<std::string, int> records;  // "<file> <state>/<param>"
    int strided = 0;
    for (const ckpt::TensorRecord& t : reader->manifest().tensors) {
      if (t.name.find("proj.weight") == std::string::npos) continue;
      ++records[t.file + " " + t.name.substr(0, t.name.find('#'))];
      strided += t.shard && t.shard->row_stride > 0;
    }
    CHECK(strided > 0);
    for (const auto& [key, n] : records) {
      INFO(key);
      CHECK(n <= 3);
    }
  }
  struct Resume {
    const char* what;
    int world, tp, micro, stage;
  };
  for (const Resume& r :
       {Resume{"TP 1", 1, 1, 8, 0}, Resume{"TP 4", 4, 4, 8, 0}, Resume{"DP 4 ZeRO-2", 4, 1, 2, 2},
        Resume{"TP 2 x DP 2 ZeRO-2", 4, 2, 4, 2}, Resume{"TP 2 x DP 2 ZeRO-1", 4, 2, 4, 1}}) {
    INFO("resumed at " << r.what);
    const Run rest = Train(job(r.micro, r.stage, 20, true), r.world, r.tp, 10);
    REQUIRE(rest.loss.size() == 10);
    std::vector<double> want(single.loss.begin() + 10, single.loss.end());
    CheckClose(want, rest.loss, 1e-5, "resumed loss");
    if (std::string(r.what) == "TP 2 x DP 2 ZeRO-1")
      CHECK(rest.loss == std::vector<double>(whole.loss.begin() + 10, whole.loss.end()));
  }
}

}  // namespace
}  // namespace ds::worker

namespace ds::worker {
namespace {

std::string WithSp(std::string yaml) { return yaml + "parallel: {sequence_parallel: true}\n"; }

// Megatron-SP: norms, dropout and residuals on token chunks, all-gather before each
// column-parallel linear and reduce-scatter after each row-parallel one: the same numerics as
// tensor parallelism alone (1e-6), with ZeRO 1-3 over dp, and with full recompute (which
// repeats the forward's gathers and scatters).
TEST_CASE("TP + sequence parallelism equals TP alone", "[worker][tp]") {
  const std::string data = MakeData();
  const Run tp = Train(Gpt(data, 8, 0), 2, 2, 20);
  const Run sp = Train(WithSp(Gpt(data, 8, 0)), 2, 2, 20);
  CheckClose(tp.loss, sp.loss, 1e-6, "loss with sequence parallelism");
  CheckClose(tp.norm, sp.norm, 1e-5, "gradient norm with sequence parallelism");
  const Run sp4 = Train(WithSp(Gpt(data, 8, 0)), 4, 4, 20);
  CheckClose(tp.loss, sp4.loss, 1e-6, "loss at TP 4 with sequence parallelism");
  const Run llama = Train(Llama(data), 2, 2, 20);
  const Run llama_sp = Train(WithSp(Llama(data)), 2, 2, 20);
  CheckClose(llama.loss, llama_sp.loss, 1e-6, "Llama loss with sequence parallelism");
  for (int stage : {1, 2, 3}) {
    INFO("TP 2 x DP 2, stage " << stage);
    const Run run = Train(WithSp(Gpt(data, 4, stage)), 4, 2, 20);
    CheckClose(tp.loss, run.loss, 1e-5, "loss");
  }
  std::string full = WithSp(Gpt(data, 8, 0));
  full.replace(full.find("training: {train_iters: 20}"), 27,
               "training: {train_iters: 20, recompute: full}");
  const Run recomputed = Train(full, 2, 2, 20);
  CHECK(recomputed.loss == sp.loss);
  CHECK(recomputed.weights == sp.weights);
  // Llama's first block reads the embedding only through sp_split, whose backward reads
  // nothing: the block's recompute must still find it (kept, not aliased away).
  std::string llama_full = WithSp(Llama(data)) + "activation_checkpointing: {}\n";
  const Run llama_recomputed = Train(llama_full, 2, 2, 20);
  CHECK(llama_recomputed.loss == llama_sp.loss);
  CHECK(llama_recomputed.weights == llama_sp.weights);
}

// Evaluation runs a whole forward outside the plan, with the graph's collectives at its cuts.
TEST_CASE("TP and TP + SP evaluate to the single rank's validation loss", "[worker][tp]") {
  const std::string data = MakeData();
  std::string yaml = Gpt(data, 8, 0);
  yaml.replace(yaml.find("shuffle: true}"), 14, "shuffle: true, validation: " + data + "}");
  const Run single = Train(yaml, 1, 1, 5);
  const Run tp = Train(yaml, 2, 2, 5);
  const Run sp = Train(WithSp(yaml), 2, 2, 5);
  CHECK(single.eval > 0);
  CHECK(tp.eval == Approx(single.eval).epsilon(1e-6));
  CHECK(sp.eval == Approx(single.eval).epsilon(1e-6));
}

TEST_CASE("sequence parallelism: seq_len not divisible by tp, and tp 1, are refused",
          "[worker][tp]") {
  const std::string data = MakeData();
  std::string yaml = WithSp(Gpt(data, 8, 0));
  yaml.replace(yaml.find(", seq_len: 16"), 13, ", seq_len: 15");
  auto config = config::ParseJobConfig(yaml, "sp.yaml");
  REQUIRE(config.ok());
  config->parallel.tensor = 2;
  auto graph = plan::LoadModelGraph(*config);
  REQUIRE(graph.ok());
  auto comms = parallel::LoopbackCommunicator::CreateGroup(2);
  auto t = Trainer::Create(*config, *graph, comms[0].get());
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.status().message(), Catch::Contains("parallel.sequence_parallel needs seq_len 15 "
                                                   "divisible by parallel.tensor 2"));
  config->parallel.tensor = 1;
  config->data.seq_len = 16;
  auto one = Trainer::Create(*config, *graph, nullptr);
  REQUIRE_FALSE(one.ok());
  CHECK_THAT(one.status().message(), Catch::Contains("it needs parallel.tensor > 1"));
}

}  // namespace
}  // namespace ds::worker
