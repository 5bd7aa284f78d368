// End-to-end tests of the single-rank engine: exact resume, accumulation equivalence,
// mixed precision against fp32, and fp16 overflow skipping.
#include "runtime/worker/trainer.h"
#include "runtime/worker/task_eval.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <catch2/catch.hpp>

#include "runtime/data/token_file.h"
#include "runtime/plan/model_loader.h"

namespace ds::worker {
namespace {

std::string TmpDir(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(d ? d : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A token file with a learnable pattern (mostly repeating a short cycle) plus noise.
std::string MakeData(const std::string& dir) {
  std::mt19937 gen(5);
  std::vector<uint32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = gen() % 5 == 0 ? gen() % 32 : static_cast<uint32_t>((i * 7) % 29);
  std::string path = dir + "/train.tok";
  REQUIRE(data::WriteTokenFile(path, tokens, data::TokenDType::kUint16, 32).ok());
  return path;
}

std::string Config(const std::string& dir, const std::string& extra, const std::string& load = "") {
  return "train_micro_batch_size_per_gpu: 4\n"
         "gradient_accumulation_steps: 1\n"
         "gradient_clipping: 1.0\n"
         "optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}\n"
         "scheduler: {type: WarmupLR, params: {warmup_max_lr: 0.003, warmup_num_steps: 5, "
         "warmup_type: linear}}\n"
         "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 32, max_seq_len: "
         "16, dropout: 0.1}\n"
         "data: {train: " +
         dir +
         "/train.tok, seq_len: 16, shuffle: true}\n"
         "training: {train_iters: 20}\n"
         "checkpoint: {dir: " +
         dir + "/ckpt" + (load.empty() ? "" : ", load: " + load) + "}\n" + extra;
}

std::unique_ptr<Trainer> MakeTrainer(const std::string& yaml) {
  auto config = config::ParseJobConfig(yaml, "test.yaml");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  auto graph = plan::LoadModelGraph(*config);
  REQUIRE(graph.ok());
  auto t = Trainer::Create(*config, std::move(graph).value());
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  Status s = (*t)->Initialize();
  INFO(s.ToString());
  REQUIRE(s.ok());
  return std::move(t).value();
}

std::vector<double> Train(Trainer& t, int steps, std::vector<StepMetrics>* all = nullptr) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    auto m = t.TrainStep();
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    losses.push_back(m->loss);
    if (all) all->push_back(*m);
  }
  return losses;
}

std::vector<float> Weights(Trainer& t) {
  zero::ParamStore& p = t.params();
  return std::vector<float>(p.master(), p.master() + p.total_elements());
}

TEST_CASE("Trainer: 20 steps straight equal 10 + restart + 10, bit for bit", "[worker]") {
  for (const std::string precision :
       {"", "bf16: {enabled: true}\n", "fp16: {enabled: true, initial_scale_power: 8}\n"}) {
    INFO("precision block: " << precision);
    std::string dir = TmpDir("resume");
    MakeData(dir);
    auto straight = MakeTrainer(Config(dir, precision));
    std::vector<double> a = Train(*straight, 20);
    std::vector<float> wa = Weights(*straight);

    auto first = MakeTrainer(Config(dir, precision));
    std::vector<double> b = Train(*first, 10);
    REQUIRE(first->SaveCheckpoint().ok());
    first.reset();
    auto second = MakeTrainer(Config(dir, precision, "latest"));
    REQUIRE(second->step() == 10);
    std::vector<double> c = Train(*second, 10);
    b.insert(b.end(), c.begin(), c.end());
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
    std::vector<float> wb = Weights(*second);
    CHECK(std::memcmp(wa.data(), wb.data(), wa.size() * 4) == 0);
    CHECK(a.back() < a.front());  // it learns
  }
}

TEST_CASE("Trainer: accumulation 2 x micro 2 reproduces micro 4", "[worker]") {
  std::string dir = TmpDir("accum");
  MakeData(dir);
  auto yaml = [&](int micro, int gas) {
    std::string c = Config(dir, "");
    c.replace(c.find("train_micro_batch_size_per_gpu: 4"), 33,
              "train_micro_batch_size_per_gpu: " + std::to_string(micro));
    c.replace(c.find("gradient_accumulation_steps: 1"), 30,
              "gradient_accumulation_steps: " + std::to_string(gas));
    c.replace(c.find("shuffle: true"), 13, "shuffle: false");
    c.replace(c.find("dropout: 0.1"), 12, "dropout: 0.0");
    return c;
  };
  auto one = MakeTrainer(yaml(4, 1));
  auto two = MakeTrainer(yaml(2, 2));
  std::vector<double> a = Train(*one, 10), b = Train(*two, 10);
  for (size_t i = 0; i < a.size(); ++i) CHECK(b[i] == Approx(a[i]).epsilon(1e-5));
}

TEST_CASE("Trainer: bf16 and fp16 follow the fp32 loss curve", "[worker]") {
  std::string dir = TmpDir("precision");
  MakeData(dir);
  std::vector<double> f32 = Train(*MakeTrainer(Config(dir, "")), 15);
  std::vector<double> bf16 = Train(*MakeTrainer(Config(dir, "bf16: {enabled: true}\n")), 15);
  std::vector<double> f16 = Train(*MakeTrainer(Config(dir, "fp16: {enabled: true}\n")), 15);
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO("step " << i);
    // bf16 keeps 8 bits of mantissa in weights and gradients: a few percent at most.
    CHECK(bf16[i] == Approx(f32[i]).epsilon(0.03));
    CHECK(f16[i] == Approx(f32[i]).epsilon(0.01));
  }
}

// bf16's two ways of multiplying on the CPU (cpu_matmul.h), each forced whatever this CPU has:
// bf16 inputs through oneDNN (native with AVX512_BF16 / AMX, emulated elsewhere: the path such
// CPUs take by default) and fp32 products of the widened weights (the fallback everywhere else).
// Both stay within 2e-2 of fp32 and learn; they differ (activations rounded or not).
TEST_CASE("Trainer: bf16 products in bf16 and in fp32 both follow the fp32 curve", "[worker]") {
  std::string dir = TmpDir("bf16matmul");
  MakeData(dir);
  std::vector<double> f32 = Train(*MakeTrainer(Config(dir, "")), 15);
  auto run = [&](const char* mode) {
    return Train(*MakeTrainer(Config(dir, std::string("bf16: {enabled: true}\n"
                                                      "device: {cpu_bf16_matmul: ") +
                                              mode + "}\n")),
                 15);
  };
  std::vector<double> native = run("bf16"), widened = run("fp32");
  bool differ = false;
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO("step " << i);
    CHECK(native[i] == Approx(f32[i]).epsilon(0.02));
    CHECK(widened[i] == Approx(f32[i]).epsilon(0.02));
    differ = differ || native[i] != widened[i];
  }
  CHECK(differ);  // the first really rounds the activations to bf16
  CHECK(native.back() < native.front());
  CHECK(widened.back() < widened.front());
}

TEST_CASE("Trainer: fp16 overflow skips the step and lowers the scale", "[worker]") {
  std::string dir = TmpDir("overflow");
  MakeData(dir);
  // 2^30 makes the fp16 gradients overflow; hysteresis 1 halves at once.
  auto t =
      MakeTrainer(Config(dir, "fp16: {enabled: true, initial_scale_power: 30, hysteresis: 1}\n"));
  std::vector<float> before = Weights(*t);
  std::vector<StepMetrics> m;
  Train(*t, 1, &m);
  CHECK(m[0].skipped);
  CHECK(std::memcmp(before.data(), Weights(*t).data(), before.size() * 4) == 0);  // no update
  Train(*t, 25, &m);
  int skipped = 0;
  for (const StepMetrics& s : m) skipped += s.skipped;
  CHECK(skipped >= 2);
  CHECK(m.back().loss_scale < std::ldexp(1.0, 30));
  CHECK_FALSE(m.back().skipped);
  CHECK(m.back().loss < m[skipped].loss);  // training continues once the scale fits
}

TEST_CASE("Trainer: Llama (RMSNorm, RoPE, SwiGLU, GQA) trains; weights load from safetensors",
          "[worker]") {
  std::string dir = TmpDir("llama");
  MakeData(dir);
  std::string yaml = Config(dir, "");
  yaml.replace(yaml.find("model: {family: gpt2"), 20, "model: {family: llama, n_kv_head: 2");
  yaml.replace(yaml.find(", dropout: 0.1"), 14, "");
  auto t = MakeTrainer(yaml);
  CHECK(t->graph().FindTensor("lm_head.weight") >= 0);
  std::vector<double> losses = Train(*t, 20);
  CHECK(losses.back() < losses.front() - 0.3);
  REQUIRE(t->ExportWeights(dir + "/w.safetensors").ok());
  auto fresh = MakeTrainer(yaml);
  REQUIRE(fresh->LoadWeights(dir + "/w.safetensors").ok());
  std::vector<float> a = Weights(*t), b = Weights(*fresh);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  CHECK_FALSE(fresh->LoadWeights(dir + "/missing.safetensors").ok());
}

TEST_CASE("Trainer: bad checkpoints are rejected naming the file", "[worker]") {
  std::string dir = TmpDir("badckpt");
  MakeData(dir);
  auto t = MakeTrainer(Config(dir, ""));
  Train(*t, 2);
  REQUIRE(t->SaveCheckpoint().ok());
  // A checkpoint of another model shape.
  auto other = config::ParseJobConfig(
      Config(dir, "").replace(Config(dir, "").find("n_embd: 32"), 10, "n_embd: 64"), "o.yaml");
  REQUIRE(other.ok());
  auto g = plan::LoadModelGraph(*other);
  REQUIRE(g.ok());
  auto t2 = Trainer::Create(*other, std::move(g).value());
  REQUIRE(t2.ok());
  Status s = (*t2)->LoadCheckpoint(dir + "/ckpt");
  INFO(s.ToString());
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("step_00000002") != std::string::npos);
  CHECK(s.message().find("shape") != std::string::npos);
}

TEST_CASE("ExactPercent never rounds a miss to 100% or a hit to 0%", "[worker]") {
  CHECK(ExactPercent(1946, 2000) == "97.3");
  CHECK(ExactPercent(1999, 2000) == "99.95");
  CHECK(ExactPercent(2000, 2000) == "100.0");
  CHECK(ExactPercent(199999, 200000) == "99.999");  // 99.9995 rounds down here, not to 100
  CHECK(ExactPercent(1, 20000) == "0.01");          // 0.005: the first rounding that is not 0
  CHECK(ExactPercent(0, 2000) == "0.0");
}

}  // namespace
}  // namespace ds::worker
