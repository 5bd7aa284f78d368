// LoRA through the Trainer (model.lora, runtime/graph/lora.h): with B = 0 the adapted model's
// loss and logits equal the base model's bit for bit, dropout streams included (the frozen
// weights draw as the base model's parameters do); merging the adapters (ExportMerged) gives
// the adapted model's logits; under PEFT's keys only the adapters train and the frozen weights
// keep every bit, while DeepSpeed-Chat's only_optimize_lora false trains the base weights too,
// with its scale lora_scaling / lora_dim and its initialization bound 1 / sqrt(lora_dim). The
// hybrid engine's generator reads the base model with the adapters fused: the merged model's
// tokens and logits, again after training steps and GatherParams.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/exec/executor.h"
#include "runtime/generate/generator.h"
#include "runtime/graph/lora.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

std::string Dir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::unique_ptr<Trainer> Model(const std::string& lora, double dropout = 0.0) {
  const std::string data = testing::WriteTinyTokens("lora_train.tok");
  const std::string yaml =
      "train_batch_size: 2\ntrain_micro_batch_size_per_gpu: 2\n"
      "optimizer: {type: AdamW, params: {lr: 0.01}}\n"
      "model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 32, "
      "max_seq_len: 16, dropout: " +
      std::to_string(dropout) + (lora.empty() ? "" : ", lora: " + lora) + "}\n" +
      "data: {train: " + data + ", seq_len: 16, shuffle: false}\n" +
      "training: {train_iters: 3}\ndevice: {type: cpu, threads: 1}\n";
  auto t = testing::MakeTrainer(yaml, nullptr, 0, "lora.yaml");
  REQUIRE(t.ok());
  REQUIRE((*t)->Initialize().ok());
  return std::move(t).value();
}

// The training executor's forward on fixed tokens: the loss and the logits.
std::pair<float, std::vector<float>> Forward(exec::Executor& ex, uint64_t seed) {
  const int64_t n = ex.batch() * ex.seq();
  for (int64_t i = 0; i < n; ++i) {
    ex.ids()[i] = static_cast<int32_t>((7 * i + 3) % 32);
    ex.targets()[i] = static_cast<int32_t>((5 * i + 1) % 32);
  }
  REQUIRE(ex.Forward(seed).ok());
  const Tensor logits = ex.Activation("logits");
  return {ex.loss(), std::vector<float>(logits.f32(), logits.f32() + logits.numel())};
}

// Greedy tokens and the first logits of `gen` on fixed prompts.
std::pair<std::vector<std::vector<int32_t>>, std::vector<float>> Greedy(generate::Generator& gen) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 9, 4, 1}, {7, 2}};
  REQUIRE(gen.Prefill(prompts, 0).ok());
  std::vector<float> logits(gen.Logits(0), gen.Logits(0) + gen.vocab());
  generate::GenerateRequest r;
  r.prompts = prompts;
  r.max_new_tokens = 6;
  auto out = gen.Generate(r);
  REQUIRE(out.ok());
  return {out->tokens, logits};
}

void RandomizeB(zero::ParamStore& p, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.5f);
  for (const zero::ParamSlot& s : p.slots()) {
    if (s.name.find("lora_B") == std::string::npos) continue;
    float* v = p.MasterView(s).f32();
    for (int64_t i = 0; i < s.numel; ++i) v[i] = normal(rng);
  }
  p.SyncModelFromMaster();
  p.MarkModelChanged();
}

// The merged model's generation, through a base-model trainer loading the merged export.
std::pair<std::vector<std::vector<int32_t>>, std::vector<float>> MergedGreedy(Trainer& lora) {
  const std::string merged = Dir() + "/lora_fused.safetensors";
  REQUIRE(lora.ExportWeights(merged).ok());
  auto base = Model("");
  REQUIRE(base->LoadWeights(merged).ok());
  auto gen = base->MakeGenerator(2, 16);
  REQUIRE(gen.ok());
  return Greedy(**gen);
}

TEST_CASE("with B = 0 the adapted model computes the base model's logits, dropout included") {
  auto base = Model("", 0.1);
  auto lora = Model("{r: 4, lora_alpha: 8, target_modules: all-linear, lora_dropout: 0.2}", 0.1);
  REQUIRE(lora->frozen() != nullptr);
  CHECK(lora->frozen()->num_parameters() == base->params().num_parameters());
  const auto [want_loss, want] = Forward(base->executor(), 99);
  const auto [got_loss, got] = Forward(lora->executor(), 99);
  CHECK(got_loss == want_loss);
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
}

TEST_CASE("the merged export computes the adapted model's logits") {
  auto lora = Model("{r: 4, lora_alpha: 8, target_modules: [c_attn, c_fc]}");
  RandomizeB(lora->params(), 5);  // a non-zero B, so the adapters count
  const auto [adapted_loss, adapted] = Forward(lora->executor(), 1);
  const std::string merged = Dir() + "/lora_merged.safetensors";
  REQUIRE(lora->ExportWeights(merged).ok());
  auto base = Model("");
  REQUIRE(base->LoadWeights(merged).ok());
  const auto [merged_loss, got] = Forward(base->executor(), 1);
  CHECK(merged_loss == Approx(adapted_loss).epsilon(1e-5));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - adapted[i])));
  CHECK(worst < 1e-4);
  CHECK(std::abs(adapted_loss - Forward(Model("")->executor(), 1).first) > 1e-3);  // B mattered
}

TEST_CASE("the hybrid engine generates with the adapters fused, refreshed after training") {
  auto lora = Model("{r: 4, lora_alpha: 8, target_modules: all-linear}");
  RandomizeB(lora->params(), 9);
  auto gen = lora->MakeGenerator(2, 16);
  REQUIRE(gen.ok());
  auto [tokens, logits] = Greedy(**gen);
  auto [want_tokens, want_logits] = MergedGreedy(*lora);
  CHECK(tokens == want_tokens);
  for (size_t i = 0; i < logits.size(); ++i)
    CHECK(logits[i] == Approx(want_logits[i]).margin(1e-5));
  // Training moves the adapters; the next GatherParams fuses them again for the same generator.
  for (int i = 0; i < 3; ++i) REQUIRE(lora->TrainStep().ok());
  REQUIRE(lora->GatherParams().ok());
  auto [after_tokens, after_logits] = Greedy(**gen);
  lora->ReleaseParams();
  auto [want_after, want_after_logits] = MergedGreedy(*lora);
  CHECK(after_tokens == want_after);
  for (size_t i = 0; i < after_logits.size(); ++i)
    CHECK(after_logits[i] == Approx(want_after_logits[i]).margin(1e-5));
  CHECK(std::abs(after_logits[0] - logits[0]) > 1e-6);  // the refresh changed something
}

TEST_CASE("PEFT's LoRA trains the adapters only; DeepSpeed-Chat's can train the base too") {
  auto peft = Model("{r: 4, lora_alpha: 8}");
  for (const zero::ParamSlot& s : peft->params().slots()) CHECK(IsLoraParam(s.name));
  const zero::ParamStore& frozen = *peft->frozen();
  std::vector<float> before(frozen.master(), frozen.master() + frozen.total_elements());
  std::vector<float> adapters(peft->params().master(),
                              peft->params().master() + peft->params().total_elements());
  for (int i = 0; i < 3; ++i) REQUIRE(peft->TrainStep().ok());
  CHECK(std::memcmp(before.data(), frozen.master(), before.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(adapters.data(), peft->params().master(), adapters.size() * 4) != 0);

  auto dschat = Model("{lora_dim: 4, lora_module_name: h.1., only_optimize_lora: false}");
  CHECK(dschat->frozen() == nullptr);
  int adapters_seen = 0;
  for (const LoraAdapter& a : FindAdapters(dschat->graph())) {
    CHECK(a.module.find("h.1.") != std::string::npos);  // layer 1 only
    CHECK(a.scale == Approx(0.25));                     // lora_scaling 1 / lora_dim 4
    ++adapters_seen;
  }
  CHECK(adapters_seen == 4);  // c_attn, c_proj, c_fc and the MLP's c_proj of block 1
  float widest = 0;
  for (const zero::ParamSlot& s : dschat->params().slots())
    if (s.name.find("lora_A") != std::string::npos)
      for (int64_t i = 0; i < s.numel; ++i)
        widest = std::max(widest, std::abs(dschat->params().master()[s.offset + i]));
  CHECK(widest <= 0.5f);  // uniform in +-1/sqrt(4), wider than PEFT's 1/sqrt(32)
  CHECK(widest > 0.3f);
  const zero::ParamSlot* wte = dschat->params().Find("wte");
  REQUIRE(wte != nullptr);
  std::vector<float> w0(dschat->params().master() + wte->offset,
                        dschat->params().master() + wte->offset + wte->numel);
  for (int i = 0; i < 3; ++i) REQUIRE(dschat->TrainStep().ok());
  CHECK(std::memcmp(w0.data(), dschat->params().master() + wte->offset, w0.size() * 4) != 0);
}

}  // namespace
}  // namespace ds::worker
