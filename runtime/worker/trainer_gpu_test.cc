// GPU test (tag gpu; exits 77 without a device): the tiny GPT trained with device.type cuda
// follows the CPU loss curve for 20 steps, with the model states and the optimizer on the GPU
// (the default: DeviceStates) and with offload_optimizer (forward and backward on the GPU,
// gradients added into the host ParamStore, the optimizer on the host, ZeRO-Offload).
//   fp32: within a relative 1e-4 at every step. The GPU kernels sum in other orders than the
//         CPU ones (GEMM tiling, reductions), and 20 steps of AdamW compound it.
//   bf16: within 2%. The CPU widens bf16 weights and computes in fp32; the GPU also keeps
//         activations and their gradients in bf16 (8 mantissa bits, 2^-8 per rounding).
#include <cmath>
#include <cstdlib>
#include <random>

#include <catch2/catch.hpp>

#include "runtime/data/token_file.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"

namespace ds::worker {
namespace {

std::vector<double> Train(const std::string& device, const std::string& data,
                          const std::string& extra = "") {
  const std::string yaml =
      extra +
      "train_batch_size: 8\n"
      "train_micro_batch_size_per_gpu: 4\n"
      "gradient_clipping: 1.0\n"
      "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
      "model: {family: gpt2, n_layer: 2, n_embd: 64, n_head: 4, vocab_size: 32, max_seq_len: 32}\n"
      "data: {train: " +
      data +
      ", seq_len: 32, shuffle: true}\n"
      "training: {train_iters: 20}\n"
      "device: {type: " +
      device + ", threads: 2}\n";
  auto config = config::ParseJobConfig(yaml, device + ".yaml");
  REQUIRE(config.ok());
  auto graph = plan::LoadModelGraph(*config);
  REQUIRE(graph.ok());
  auto t = Trainer::Create(*config, std::move(graph).value());
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  REQUIRE((*t)->Initialize().ok());
  std::vector<double> losses;
  for (int i = 0; i < 20; ++i) {
    auto m = (*t)->TrainStep();
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    losses.push_back(m->loss);
  }
  return losses;
}

std::string MakeData() {
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(d ? d : "/tmp") + "/gpu_train.tok";
  std::mt19937 gen(3);
  std::vector<uint32_t> tokens(40000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = gen() % 3 == 0 ? gen() % 32 : (i * 5) % 31;
  REQUIRE(data::WriteTokenFile(path, tokens, data::TokenDType::kUint16, 32).ok());
  return path;
}

TEST_CASE("GPU: the tiny GPT on one GPU follows the CPU loss curve (fp32)", "[gpu][worker]") {
  const std::string path = MakeData();
  const std::vector<double> cpu = Train("cpu", path);
  CHECK(cpu.back() < cpu.front());
  // Stage 2 on one GPU moves each bucket into the gradient shard on the device.
  // Stage 3 gathers every weight matrix into the gather arena (persistence threshold 100).
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage " << stage);
    const std::vector<double> gpu = Train(
        "cuda", path,
        "zero_optimization: {stage: " + std::to_string(stage) + ", reduce_bucket_size: 20000" +
            (stage == 3
                 ? ", stage3_param_persistence_threshold: 100, stage3_max_reuse_distance: 1000"
                 : "") +
            "}\n");
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO("step " << i + 1 << ": cpu " << cpu[i] << " gpu " << gpu[i]);
      CHECK(std::abs(gpu[i] - cpu[i]) <= 1e-4 * std::abs(cpu[i]));
    }
  }
}

TEST_CASE("GPU: the tiny GPT on one GPU follows the CPU loss curve (bf16)", "[gpu][worker]") {
  const std::string path = MakeData();
  const std::vector<double> cpu = Train("cpu", path, "bf16: {enabled: true}\n");
  const std::vector<double> gpu = Train("cuda", path, "bf16: {enabled: true}\n");
  CHECK(cpu.back() < cpu.front());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("step " << i + 1 << ": cpu " << cpu[i] << " gpu " << gpu[i]);
    CHECK(std::abs(gpu[i] - cpu[i]) <= 0.02 * std::abs(cpu[i]));
  }
}

// fp16 (static loss scale): activations and gradients in fp16 on the GPU (attention on the
// simple kernels), within 2% of the CPU's fp16 curve.
TEST_CASE("GPU: the tiny GPT on one GPU follows the CPU loss curve (fp16)", "[gpu][worker]") {
  const std::string path = MakeData();
  const std::string fp16 = "fp16: {enabled: true, loss_scale: 1024}\n";
  const std::vector<double> cpu = Train("cpu", path, fp16);
  const std::vector<double> gpu = Train("cuda", path, fp16);
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("step " << i + 1 << ": cpu " << cpu[i] << " gpu " << gpu[i]);
    CHECK(std::abs(gpu[i] - cpu[i]) <= 0.02 * std::abs(cpu[i]));
  }
}

// ZeRO-Offload: the same curves with the optimizer on the host (stage 1, offload_optimizer).
TEST_CASE("GPU: offload_optimizer trains on the GPU with the optimizer on the host",
          "[gpu][worker]") {
  const std::string path = MakeData();
  const std::string offload = "zero_optimization: {stage: 1, offload_optimizer: {device: cpu}}\n";
  for (const std::string precision : {"", "bf16: {enabled: true}\n"}) {
    INFO((precision.empty() ? "fp32" : "bf16"));
    const double tol = precision.empty() ? 1e-4 : 0.02;
    const std::vector<double> cpu = Train("cpu", path, precision);
    const std::vector<double> gpu = Train("cuda", path, precision + offload);
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO("step " << i + 1 << ": cpu " << cpu[i] << " gpu " << gpu[i]);
      CHECK(std::abs(gpu[i] - cpu[i]) <= tol * std::abs(cpu[i]));
    }
  }
}

}  // namespace
}  // namespace ds::worker
