// Data parallelism through the step planner: DP = 2 and 4 (ranks as threads over the
// loopback communicator) reproduce the single-rank loss curve with the same global batch
// under ZeRO stages 0-3. Stage 3 runs with a persistence threshold of 100 elements, so every
// weight matrix is partitioned and gathered per block (biases and norm gains persist).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"
#include "zero/param_store.h"
#include "zero/shard_layout.h"

namespace ds::worker {
namespace {

std::string MakeData() { return testing::WriteTinyTokens("dp_train.tok"); }

std::string Config(const std::string& data, int micro, int stage, const std::string& extra) {
  return testing::TinyGptJob(data, micro, stage, "cpu", extra);
}

// A trainer for one rank of `yaml` over `comm`: the config parsed, the graph loaded.
StatusOr<std::unique_ptr<Trainer>> MakeTrainer(const std::string& yaml,
                                               parallel::Communicator* comm) {
  return testing::MakeTrainer(yaml, comm, 0, "dp.yaml");
}

// DS_TEST_LOSS_LOG=FILE appends every curve trained, bit for bit (hex floats), so that a
// refactoring can show the curves did not move (tools/bench/behaviour_snapshot.sh).
void LogCurve(int world, const std::vector<double>& losses) {
  const char* path = std::getenv("DS_TEST_LOSS_LOG");
  if (!path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  std::fprintf(f, "world %d:", world);
  for (double l : losses) std::fprintf(f, " %a", l);
  std::fprintf(f, "\n");
  std::fclose(f);
}

// Trains `steps` steps on `world` ranks (threads); returns rank 0's loss curve. With `save`,
// every rank calls SaveCheckpoint at the end (rank 0 writes).
std::vector<double> Train(const std::string& yaml, int world, int steps, bool save = false) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto t = MakeTrainer(yaml, comms[r].get());
      if (!t.ok()) return void(errors[r] = t.status());
      if (Status s = (*t)->Initialize(); !s.ok()) return void(errors[r] = s);
      for (int i = 0; i < steps; ++i) {
        auto m = (*t)->TrainStep();
        if (!m.ok()) return void(errors[r] = m.status());
        losses[r].push_back(m->loss);
      }
      if (save) {
        if (Status s = (*t)->SaveCheckpoint(); !s.ok()) errors[r] = s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r].ToString());
    REQUIRE(errors[r].ok());
  }
  for (int r = 1; r < world; ++r)
    CHECK(losses[r] == losses[0]);  // every rank reports the global loss
  LogCurve(world, losses[0]);
  return losses[0];
}

TEST_CASE("DP: 2 and 4 ranks reproduce the single-rank fp32 loss curve, stages 0-3",
          "[worker][dp]") {
  const std::string data = MakeData();
  const std::vector<double> single = Train(Config(data, 8, 0, ""), 1, 20);
  CHECK(single.back() < single.front());
  for (int world : {2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      for (const std::string overlap : {"false", "true"}) {
        INFO("dp " << world << " stage " << stage << " overlap_comm " << overlap);
        std::string yaml = Config(data, 8 / world, stage, "");
        yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
                     "reduce_bucket_size: 3000, overlap_comm: " + overlap);
        std::vector<double> dp = Train(yaml, world, 20);
        for (size_t i = 0; i < single.size(); ++i) {
          INFO("step " << i + 1 << ": single " << single[i] << " dp " << dp[i]);
          CHECK(std::abs(dp[i] - single[i]) <= 1e-5 * std::abs(single[i]));
        }
      }
    }
  }
}

// Stages 2 and 3 reduce every micro-batch's buckets into the gradient shard as they fill:
// with gradient accumulation the shard sums the micro-batches (gas 2 at DP = 2).
TEST_CASE("DP: gradient accumulation under stages 2 and 3 follows the single-rank curve",
          "[worker][dp]") {
  const std::string data = MakeData();
  const std::vector<double> single = Train(Config(data, 8, 0, ""), 1, 20);
  for (int stage : {2, 3}) {
    INFO("dp 2, micro 2, gas 2, stage " << stage);
    std::string yaml = Config(data, 2, stage, "");
    yaml.replace(yaml.find("reduce_bucket_size: 3000"), 24,
                 "reduce_bucket_size: 3000, overlap_comm: true");
    const std::vector<double> dp = Train(yaml, 2, 20);
    for (size_t i = 0; i < single.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(std::abs(dp[i] - single[i]) <= 1e-5 * std::abs(single[i]));
    }
  }
}

// bf16 keeps 8 mantissa bits in the stored weights and gradients. Each rank rounds its own
// accumulated gradient to bf16 and the reduction (in bf16, the plan's comm dtype, as DeepSpeed
// does by default) rounds the sum again, where one rank rounds the whole sum once: the
// gradients differ by a few bf16 roundings (2^-8 relative each), and the curves agree to 1%.
// Stages 2 and 3 keep the gradient shard in bf16 too, and DP = 4 rounds the partial sums of
// the ring once more per hop; fp32 communication (communication_data_type) is checked too.
TEST_CASE("DP: bf16 with 2 and 4 ranks follows the single-rank curve within bf16 rounding",
          "[worker][dp]") {
  const std::string data = MakeData();
  const std::vector<double> single = Train(Config(data, 8, 1, "bf16: {enabled: true}\n"), 1, 15);
  for (int world : {2, 4})
    for (int stage : {1, 2, 3})
      for (const char* comm : {"", "communication_data_type: fp32\n"}) {
        INFO("dp " << world << " stage " << stage << " " << comm);
        const std::vector<double> dp =
            Train(Config(data, 8 / world, stage, std::string("bf16: {enabled: true}\n") + comm),
                  world, 15);
        for (size_t i = 0; i < single.size(); ++i) CHECK(dp[i] == Approx(single[i]).epsilon(0.01));
      }
}

// A checkpoint of sharded optimizer state (DP = 2, stage 1) is consolidated on save and
// resumes exactly at the same topology, and as one rank or as DP = 4 stage 2 (resharded).
TEST_CASE("DP: sharded checkpoints resume at the same and at other world sizes and stages",
          "[worker][dp]") {
  const std::string data = MakeData();
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string ckpt = std::string(d ? d : "/tmp") + "/dp_ckpt";
  std::filesystem::remove_all(ckpt);
  auto yaml = [&](int micro, int stage, bool load) {
    return Config(data, micro, stage,
                  "checkpoint: {dir: " + ckpt + (load ? ", load: latest" : "") + "}\n");
  };
  const std::vector<double> straight = Train(yaml(4, 1, false), 2, 20);
  std::filesystem::remove_all(ckpt);
  Train(yaml(4, 1, false), 2, 10, /*save=*/true);
  const std::vector<double> same = Train(yaml(4, 1, true), 2, 10);
  const std::vector<double> one = Train(yaml(8, 0, true), 1, 10);
  const std::vector<double> four = Train(yaml(2, 2, true), 4, 10);
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 11);
    CHECK(same[i] == straight[10 + i]);  // bit for bit
    CHECK(std::abs(one[i] - straight[10 + i]) <= 1e-5 * straight[10 + i]);
    CHECK(std::abs(four[i] - straight[10 + i]) <= 1e-5 * straight[10 + i]);
  }
  // Saved by DP = 4 under stage 3: resumes as stage 3 again, as DP = 2 stage 1 and as one rank.
  std::filesystem::remove_all(ckpt);
  Train(yaml(2, 3, false), 4, 10, /*save=*/true);
  const std::vector<double> s3 = Train(yaml(2, 3, true), 4, 10);
  const std::vector<double> s1 = Train(yaml(4, 1, true), 2, 10);
  const std::vector<double> s0 = Train(yaml(8, 0, true), 1, 10);
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 11 << " after a DP=4 stage-3 checkpoint");
    CHECK(std::abs(s3[i] - straight[10 + i]) <= 1e-5 * straight[10 + i]);
    CHECK(std::abs(s1[i] - straight[10 + i]) <= 1e-5 * straight[10 + i]);
    CHECK(std::abs(s0[i] - straight[10 + i]) <= 1e-5 * straight[10 + i]);
  }
}

// Stage 3 keeps only the persistent units of the flat parameters between steps: the rest read
// as zero until a step gathers them, and only this rank's shard of the fp32 master exists.
TEST_CASE("DP: stage 3 releases partitioned parameters outside the step", "[worker][dp]") {
  const std::string data = MakeData();
  auto comms = parallel::LoopbackCommunicator::CreateGroup(1);
  auto t = MakeTrainer(Config(data, 8, 3, ""), comms[0].get());
  REQUIRE(t.ok());
  REQUIRE((*t)->Initialize().ok());
  REQUIRE((*t)->TrainStep().ok());
  const zero::ParamStore& ps = (*t)->params();
  CHECK(ps.params_partitioned());
  CHECK(ps.grads_partitioned());
  int64_t zero_matrices = 0, matrices = 0;
  for (const zero::ParamSlot& s : ps.slots()) {
    if (s.numel <= 100) continue;  // persistent
    ++matrices;
    const float* w = static_cast<const float*>(ps.model()) + s.offset;
    bool all_zero = true;
    for (int64_t i = 0; i < s.numel; ++i) all_zero = all_zero && w[i] == 0.0f;
    zero_matrices += all_zero;
    CHECK(*ps.MasterAt(s.offset) != 0.0f);  // the shard still holds the trained value
  }
  CHECK(matrices > 0);
  CHECK(zero_matrices == matrices);
}

// bf16 + ZeRO-1 at DP = 2 keeps only its shard of the fp32 master weights; the updated 16-bit
// shards are all-gathered. Resume is exact at the same topology and close as one rank.
TEST_CASE("DP: bf16 ZeRO-1 shards the fp32 master; its checkpoints resume", "[worker][dp]") {
  const std::string data = MakeData();
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string ckpt = std::string(d ? d : "/tmp") + "/dp_bf16_ckpt";
  auto yaml = [&](int micro, bool load) {
    return Config(data, micro, 1,
                  "bf16: {enabled: true}\ncheckpoint: {dir: " + ckpt +
                      (load ? ", load: latest" : "") + "}\n");
  };
  {
    auto comms = parallel::LoopbackCommunicator::CreateGroup(2);
    auto t = MakeTrainer(yaml(4, false), comms[0].get());
    REQUIRE(t.ok());
    const zero::ParamStore& ps = (*t)->params();
    CHECK(ps.master_sharded());
    CHECK(ps.shard_elements() <= (ps.total_elements() + 1) / 2 + 16);
  }
  std::filesystem::remove_all(ckpt);
  const std::vector<double> straight = Train(yaml(4, false), 2, 12);
  std::filesystem::remove_all(ckpt);
  Train(yaml(4, false), 2, 6, /*save=*/true);
  const std::vector<double> same = Train(yaml(4, true), 2, 6);
  const std::vector<double> one = Train(yaml(8, true), 1, 6);
  for (size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 7);
    CHECK(same[i] == straight[6 + i]);
    CHECK(one[i] == Approx(straight[6 + i]).epsilon(0.01));
  }
}

TEST_CASE("DP: a world size that does not divide the batch is rejected before training",
          "[worker][dp]") {
  const std::string data = MakeData();
  auto comms = parallel::LoopbackCommunicator::CreateGroup(3);
  auto t = MakeTrainer(Config(data, 4, 0, ""), comms[0].get());
  REQUIRE_FALSE(t.ok());
  INFO(t.status().ToString());
  CHECK(t.status().message().find("8") != std::string::npos);
}

// Creates every rank's trainer and loads `yaml`'s checkpoint (Initialize); returns each
// rank's status (no REQUIRE: the load is expected to fail on some checkpoints).
std::vector<Status> LoadOnly(const std::string& yaml, int world) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<Status> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto t = MakeTrainer(yaml, comms[r].get());
      if (!t.ok()) return void(errors[r] = t.status());
      errors[r] = (*t)->Initialize();
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::string CkptYaml(const std::string& data, const std::string& dir, int world, int stage,
                     bool load) {
  return Config(data, 8 / world, stage,
                "checkpoint: {dir: " + dir + (load ? ", load: latest" : "") + "}\n");
}

// Per-rank shard files: saved at (world, stage), resumed bit for bit at the same topology and
// within 1e-5 at each of `others` ({world, stage}), against 20 uninterrupted steps.
void CheckResume(const std::string& data, int world, int stage,
                 std::vector<std::pair<int, int>> others) {
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(d ? d : "/tmp") + "/dp_shard_resume";
  std::filesystem::remove_all(dir);
  const std::vector<double> straight = Train(CkptYaml(data, dir, world, stage, false), world, 16);
  std::filesystem::remove_all(dir);
  Train(CkptYaml(data, dir, world, stage, false), world, 8, /*save=*/true);
  const std::string step_dir = dir + "/step_00000008/";
  for (int r = 0; r < world; ++r) {
    char name[64];
    std::snprintf(name, sizeof(name), "zero_shard_rank_%05d.safetensors", r);
    INFO(step_dir + name);
    CHECK(access((step_dir + name).c_str(), R_OK) == 0);
  }
  CHECK(access((step_dir + "optimizer.safetensors").c_str(), R_OK) != 0);
  const std::vector<double> same = Train(CkptYaml(data, dir, world, stage, true), world, 8);
  for (size_t i = 0; i < 8; ++i) {
    INFO("DP=" << world << " stage " << stage << " resumed as itself, step " << i + 9);
    CHECK(same[i] == straight[8 + i]);
  }
  for (const auto& [w, st] : others) {
    const std::vector<double> other = Train(CkptYaml(data, dir, w, st, true), w, 8);
    for (size_t i = 0; i < 8; ++i) {
      INFO("DP=" << world << " stage " << stage << " resumed as DP=" << w << " stage " << st
                 << ", step " << i + 9);
      CHECK(std::abs(other[i] - straight[8 + i]) <= 1e-5 * std::abs(straight[8 + i]));
    }
  }
}

TEST_CASE("DP: per-rank shard checkpoints resume exactly and at other world sizes and stages",
          "[worker][dp][ckpt]") {
  const std::string data = MakeData();
  SECTION("DP=2 stage 1") { CheckResume(data, 2, 1, {{1, 0}, {4, 3}, {4, 2}}); }
  SECTION("DP=4 stage 2") { CheckResume(data, 4, 2, {{1, 0}, {2, 3}, {2, 1}}); }
  SECTION("DP=4 stage 3") { CheckResume(data, 4, 3, {{1, 0}, {2, 1}, {2, 3}}); }
}

// Each rank file holds exactly the rank's own elements: per state, the parameter elements of
// its segments (LayoutFor), and the files together hold every parameter element once.
TEST_CASE("DP: a shard file per rank, holding only that rank's elements", "[worker][dp][ckpt]") {
  const std::string data = MakeData();
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(d ? d : "/tmp") + "/dp_shard_sizes";
  std::filesystem::remove_all(dir);
  for (int stage : {1, 3}) {
    INFO("DP=4 stage " << stage);
    std::filesystem::remove_all(dir);
    Train(CkptYaml(data, dir, 4, stage, false), 4, 2, /*save=*/true);
    auto comms = parallel::LoopbackCommunicator::CreateGroup(4);
    auto t = MakeTrainer(CkptYaml(data, dir, 4, stage, false), comms[0].get());
    REQUIRE(t.ok());
    const zero::ParamStore& ps = (*t)->params();
    int64_t all_files = 0;
    for (int r = 0; r < 4; ++r) {
      int64_t owned = 0;  // parameter elements (no alignment padding) in r's segments
      for (const zero::ShardSegment& g :
           zero::LayoutFor((*t)->plan(), r, ps.total_elements()).segments)
        for (const zero::ParamSlot& s : ps.slots())
          owned += std::max<int64_t>(0, std::min(g.flat_begin + g.count, s.offset + s.numel) -
                                            std::max(g.flat_begin, s.offset));
      char name[64];
      std::snprintf(name, sizeof(name), "/step_00000002/zero_shard_rank_%05d.safetensors", r);
      auto f = ckpt::SafetensorsFile::Open(dir + name);
      REQUIRE(f.ok());
      int64_t stored = 0;
      for (const ckpt::SafetensorsEntry& e : f->tensors()) stored += e.spec.numel();
      CHECK(stored == 3 * owned);  // master, exp_avg, exp_avg_sq
      CHECK(owned > 0);
      CHECK(f->file_bytes() - f->data_start() == static_cast<uint64_t>(stored) * 4);
      CHECK(f->metadata().at("rank") == std::to_string(r));
      CHECK(f->metadata().at("world_size") == "4");
      all_files += stored;
    }
    CHECK(all_files == 3 * ps.num_parameters());
    CHECK((access((dir + "/step_00000002/model.safetensors").c_str(), R_OK) == 0) == (stage == 1));
  }
}

TEST_CASE("DP: a corrupt or missing rank file fails the load on every rank, naming it",
          "[worker][dp][ckpt]") {
  const std::string data = MakeData();
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(d ? d : "/tmp") + "/dp_shard_corrupt";
  std::filesystem::remove_all(dir);
  Train(CkptYaml(data, dir, 4, 2, false), 4, 2, /*save=*/true);
  const std::string file = dir + "/step_00000002/zero_shard_rank_00002.safetensors";
  auto check_all_fail = [&](const std::string& what, int world, int stage) {
    std::vector<Status> errors = LoadOnly(CkptYaml(data, dir, world, stage, true), world);
    bool named = false;
    for (const Status& s : errors) {
      INFO(what << ": " << s.ToString());
      CHECK_FALSE(s.ok());
      named =
          named || (s.message().find("zero_shard_rank_00002.safetensors") != std::string::npos &&
                    s.message().find(what) != std::string::npos);
    }
    CHECK(named);
  };
  std::string bytes;
  {
    FILE* in = std::fopen(file.c_str(), "rb");
    REQUIRE(in != nullptr);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), in)) > 0;) bytes.append(buf, n);
    std::fclose(in);
  }
  auto write = [&](const std::string& b) {
    FILE* out = std::fopen(file.c_str(), "wb");
    REQUIRE(out != nullptr);
    std::fwrite(b.data(), 1, b.size(), out);
    std::fclose(out);
  };
  std::string flipped = bytes;
  flipped[flipped.size() - 5] ^= 0x40;  // inside the last tensor's data
  write(flipped);
  check_all_fail("checksum mismatch", 2, 1);
  check_all_fail("checksum mismatch", 1, 0);
  std::remove(file.c_str());
  check_all_fail("missing", 4, 3);
  write(bytes);
  std::vector<Status> ok = LoadOnly(CkptYaml(data, dir, 2, 1, true), 2);
  for (const Status& s : ok) CHECK(s.ok());
}

}  // namespace
}  // namespace ds::worker
