// ds-ckpt consolidate on real trainer checkpoints: the fp32 weights it writes from a DP=4
// stage-3 checkpoint (one shard file per rank, no model.safetensors) equal, bit for bit, the
// weights a one-rank run holds after resuming from that checkpoint.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/data/token_file.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"
#include "tools/ds_ckpt/commands.h"

namespace ds::tools {
namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string Yaml(const std::string& data, const std::string& ckpt, int world, int stage,
                 bool load) {
  return "train_batch_size: 8\ntrain_micro_batch_size_per_gpu: " + std::to_string(8 / world) +
         "\noptimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
         "bf16: {enabled: true}\n"
         "zero_optimization: {stage: " +
         std::to_string(stage) +
         ", stage3_param_persistence_threshold: 100}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 32, max_seq_len: "
         "16}\n"
         "data: {train: " +
         data +
         ", seq_len: 16}\ntraining: {train_iters: 20}\n"
         "device: {threads: 1}\ncheckpoint: {dir: " +
         ckpt + (load ? ", load: latest" : "") + "}\n";
}

// Runs `world` ranks for `steps` steps, then saves (all ranks).
void TrainAndSave(const std::string& yaml, int world, int steps) {
  auto comms = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<Status> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto config = config::ParseJobConfig(yaml, "c.yaml");
      if (!config.ok()) return void(errors[r] = config.status());
      auto graph = plan::LoadModelGraph(*config);
      if (!graph.ok()) return void(errors[r] = graph.status());
      auto t = worker::Trainer::Create(*config, std::move(graph).value(), comms[r].get());
      if (!t.ok()) return void(errors[r] = t.status());
      Status s = (*t)->Initialize();
      for (int i = 0; i < steps && s.ok(); ++i) s = (*t)->TrainStep().status();
      if (s.ok()) s = (*t)->SaveCheckpoint();
      errors[r] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
}

TEST_CASE("ds-ckpt consolidate: a DP=4 stage-3 bf16 checkpoint equals a one-rank resume's weights",
          "[ckpt][tools]") {
  const std::string data = TmpDir() + "/consolidate.tok";
  std::mt19937 gen(3);
  std::vector<uint32_t> tokens(5000);
  for (uint32_t& t : tokens) t = gen() % 32;
  REQUIRE(data::WriteTokenFile(data, tokens, data::TokenDType::kUint16, 32).ok());
  const std::string ckpt = TmpDir() + "/consolidate_ckpt";
  std::filesystem::remove_all(ckpt);
  TrainAndSave(Yaml(data, ckpt, 4, 3, false), 4, 3);

  const std::string out = TmpDir() + "/consolidated.safetensors";
  REQUIRE(RunConsolidate({ckpt, out}).ok());
  auto file = ckpt::SafetensorsFile::Open(out);
  REQUIRE(file.ok());

  auto config = config::ParseJobConfig(Yaml(data, ckpt, 1, 0, true), "c.yaml");
  REQUIRE(config.ok());
  auto graph = plan::LoadModelGraph(*config);
  REQUIRE(graph.ok());
  auto t = worker::Trainer::Create(*config, std::move(graph).value());
  REQUIRE(t.ok());
  REQUIRE((*t)->Initialize().ok());
  REQUIRE((*t)->step() == 3);
  const zero::ParamStore& ps = (*t)->params();
  REQUIRE(file->tensors().size() == ps.slots().size());
  for (const zero::ParamSlot& s : ps.slots()) {
    INFO(s.name);
    auto got = file->Get(s.name);
    REQUIRE(got.ok());
    CHECK(got->dtype() == DType::kF32);
    CHECK(got->shape() == s.shape);
    CHECK(std::memcmp(got->data(), ps.MasterView(s).data(), s.numel * sizeof(float)) == 0);
  }
  // The same checkpoint with a rank file gone cannot be consolidated; nothing is left behind.
  std::remove((ckpt + "/step_00000003/zero_shard_rank_00001.safetensors").c_str());
  Status s = RunConsolidate({ckpt, TmpDir() + "/partial.safetensors"});
  CHECK(s.message().find("zero_shard_rank_00001.safetensors: missing") != std::string::npos);
  CHECK(std::fopen((TmpDir() + "/partial.safetensors").c_str(), "rb") == nullptr);
}

}  // namespace
}  // namespace ds::tools
