// Supervised fine-tuning through the Trainer (data.sft): the first step's loss is the mean
// next-token cross-entropy of the model's own logits over the answer tokens and end tokens
// only, not over the prompts or the pads (counting the prompt gives another loss, so the
// check can fail), for GPT-2 and Llama; left-padded rows (padding: left, a pad_mask model)
// train with the right-padded rows' losses and gradient norms.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/exec/executor.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

constexpr int64_t kSeq = 12, kEnd = 1;
const std::vector<std::vector<int64_t>> kPrompts = {{5, 6, 7, 8}, {9, 10}};
const std::vector<std::vector<int64_t>> kAnswers = {{20, 21, 22}, {30, 31, 32, 33, 34}};

std::string Dir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

void WritePairs() {
  data::IndexedDatasetWriter p(Dir() + "/sft_prompt_document", data::IndexedDtype::kUint16);
  data::IndexedDatasetWriter a(Dir() + "/sft_chosen_document", data::IndexedDtype::kUint16);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    REQUIRE(p.AddDocument(kPrompts[i]).ok());
    REQUIRE(a.AddDocument(kAnswers[i]).ok());
  }
  REQUIRE(p.Finalize().ok());
  REQUIRE(a.Finalize().ok());
}

StatusOr<std::unique_ptr<Trainer>> Model(const std::string& family, bool left = false) {
  const std::string yaml =
      "train_batch_size: 2\ntrain_micro_batch_size_per_gpu: 2\n"
      "optimizer: {type: AdamW, params: {lr: 0.01}}\nmodel: {family: " +
      family + ", n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 64, max_seq_len: 16" +
      (left ? ", pad_mask: true" : "") + "}\n" +
      "data: {seq_len: 12, shuffle: false, eod_token: 1, sft: {prompt: " + Dir() +
      "/sft_prompt_document, answer: " + Dir() + "/sft_chosen_document" +
      (left ? ", padding: left" : "") +
      "}}\ntraining: {train_iters: 2}\ndevice: {type: cpu, threads: 1}\n";
  DS_ASSIGN_OR_RETURN(auto t, testing::MakeTrainer(yaml, nullptr, 0, family + ".yaml"));
  DS_RETURN_IF_ERROR(t->Initialize());
  return t;
}

// Row i's tokens: prompt, answer, end token, pads (the end token).
std::vector<int32_t> Tokens(size_t i) {
  std::vector<int32_t> t(kPrompts[i].begin(), kPrompts[i].end());
  t.insert(t.end(), kAnswers[i].begin(), kAnswers[i].end());
  t.push_back(kEnd);
  t.resize(kSeq + 1, kEnd);
  return t;
}

// The mean cross-entropy over the positions whose next token is an answer token or the end
// token (with_prompt: over every position before the pads).
double Loss(Trainer& t, bool with_prompt) {
  auto ex = t.MakeInferenceExecutor(2, kSeq);
  REQUIRE(ex.ok());
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<int32_t> tok = Tokens(i);
    std::copy(tok.begin(), tok.begin() + kSeq, (*ex)->ids() + i * kSeq);
  }
  std::fill((*ex)->targets(), (*ex)->targets() + 2 * kSeq, 0);
  REQUIRE((*ex)->Forward(0).ok());
  const Tensor logits = (*ex)->TensorData((*ex)->graph().FindTensor("logits"), false);
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<int32_t> tok = Tokens(i);
    const int64_t first = with_prompt ? 1 : static_cast<int64_t>(kPrompts[i].size());
    const int64_t last = static_cast<int64_t>(kPrompts[i].size() + kAnswers[i].size());  // end
    for (int64_t k = first; k <= last && k <= kSeq; ++k) {  // predict token k from k - 1
      sum += testing::CrossEntropy(logits.f32() + (i * kSeq + k - 1) * 64, 64, tok[k]);
      ++n;
    }
  }
  return sum / n;
}

TEST_CASE("SFT: the loss is on the answers and their end tokens only", "[worker][sft]") {
  WritePairs();
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    auto t = Model(family);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    const double answers = Loss(**t, false), everything = Loss(**t, true);
    REQUIRE(std::fabs(answers - everything) > 1e-3);  // the prompt's share is visible
    auto step = (*t)->TrainStep();
    REQUIRE(step.ok());
    CHECK(step->loss == Approx(answers).epsilon(1e-5));
    CHECK(step->loss != Approx(everything).epsilon(1e-5));
  }
}

TEST_CASE("SFT: left-padded rows train as the right-padded ones", "[worker][sft]") {
  WritePairs();
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    auto right = Model(family), left = Model(family, true);
    INFO(left.status().ToString());
    REQUIRE((right.ok() && left.ok()));
    for (int step = 0; step < 2; ++step) {
      auto r = (*right)->TrainStep(), l = (*left)->TrainStep();
      REQUIRE((r.ok() && l.ok()));
      CHECK(l->loss == Approx(r->loss).epsilon(1e-5));
      CHECK(l->grad_norm == Approx(r->grad_norm).epsilon(1e-4));
    }
  }
  // Left padding without the model's pad mask is refused.
  const std::string yaml =
      "train_batch_size: 2\nmodel: {family: gpt2, n_layer: 1, n_embd: 16, "
      "n_head: 2, vocab_size: 64, max_seq_len: 16}\ndata: {seq_len: 12, "
      "sft: {prompt: " +
      Dir() + "/sft_prompt_document, answer: " + Dir() +
      "/sft_chosen_document, padding: left}}\ntraining: {train_iters: 1}\n";
  auto t = testing::MakeTrainer(yaml, nullptr, 0, "left.yaml");
  Status s = t.ok() ? (*t)->Initialize() : t.status();
  CHECK(s.message().find("padding left needs model.pad_mask") != std::string::npos);
}

TEST_CASE("data.sft is refused with token files and packed documents' masks", "[worker][sft]") {
  auto c =
      config::ParseJobConfig("data: {train: t.tok, sft: {prompt: p, answer: a}}\n", "job.yaml");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("cannot be combined with data.sft") != std::string::npos);
  c = config::ParseJobConfig(
      "data: {eod_mask_loss: true, eod_token: 1, sft: {prompt: p, answer: a}}\n", "job.yaml");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("not to data.sft's rows") != std::string::npos);
  c = config::ParseJobConfig("data: {sft: {prompt: p}}\n", "job.yaml");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("data.sft.answer are both required") != std::string::npos);
}

}  // namespace
}  // namespace ds::worker
