// Packed documents through whole models (data.reset_position_ids, reset_attention_mask and
// eod_mask_loss, Megatron's flags): a document packed behind another gives, at its own tokens,
// the logits it gives alone (within 1e-5), for generated GPT-2 (learned positions) and Llama
// (RoPE, grouped-query attention) and Hugging Face OPT (offset positions), GPT-NeoX (partial
// rotary), Mistral and Gemma 2 (sliding windows), Qwen2 and Phi-3; without the masks it does
// not. A training step on the packed row has the loss those masked logits give over the
// positions whose input is not EOD, so the step runs with the masks and without EOD's loss.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/config/job_config.h"
#include "runtime/data/batch_source.h"
#include "runtime/data/document_masks.h"
#include "runtime/exec/executor.h"
#include "runtime/plan/model_loader.h"
#include "runtime/worker/trainer.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

constexpr int32_t kEod = 1;
constexpr int64_t kPacked = 16, kFirst = 5, kAlone = 8;  // document B: tokens [5, 13)
const char* kFamilies = "runtime/generate/testdata/families/";

// A trainer for `model` ("gpt2", "llama" or a families/ folder) at `seq`, with or without the
// masks.
StatusOr<std::unique_ptr<Trainer>> Model(const std::string& model, int64_t seq, bool masks) {
  const bool hf = model != "gpt2" && model != "llama";
  const std::string spec = hf ? "{hf: " + std::string(kFamilies) + model + "}"
                              : "{family: " + model + ", n_layer: 2, n_embd: 32, n_head: 4, " +
                                    (model == "llama" ? "n_kv_head: 2, " : "") +
                                    "vocab_size: 64, max_seq_len: 16}";
  const std::string yaml =
      "train_batch_size: 1\ntrain_micro_batch_size_per_gpu: 1\n"
      "optimizer: {type: AdamW, params: {lr: 0.01}}\nmodel: " +
      spec + "\ndata: {seq_len: " + std::to_string(seq) +
      (masks ? ", reset_position_ids: true, reset_attention_mask: true, eod_mask_loss: true, "
               "eod_token: 1"
             : "") +
      "}\ntraining: {train_iters: 5}\ndevice: {type: cpu, threads: 1}\n";
  DS_ASSIGN_OR_RETURN(auto t, testing::MakeTrainer(yaml, nullptr, 0, model + ".yaml"));
  DS_RETURN_IF_ERROR(t->Initialize());
  return t;
}

// Document A (4 tokens, EOD), document B (7 tokens, EOD), then the start of document C.
std::vector<int32_t> PackedRow() {
  std::mt19937 rng(11);
  std::vector<int32_t> ids(kPacked);
  for (int32_t& id : ids) id = static_cast<int32_t>(2 + rng() % 62);
  ids[kFirst - 1] = ids[kFirst + kAlone - 1] = kEod;
  return ids;
}

// The logits [seq, vocab] of one row, with the packed documents' masks when the graph has them.
std::vector<float> Logits(Trainer& t, const std::vector<int32_t>& ids) {
  const int64_t seq = static_cast<int64_t>(ids.size());
  auto ex = t.MakeInferenceExecutor(1, seq);
  REQUIRE(ex.ok());
  std::copy(ids.begin(), ids.end(), (*ex)->ids());
  std::fill((*ex)->targets(), (*ex)->targets() + seq, 0);
  data::DocumentMaskOptions o;
  o.eod = kEod;
  const int starts = (*ex)->graph().FindTensor(kDocStarts);
  const int positions = (*ex)->graph().FindTensor(kDocPositions);
  o.reset_attention_mask = starts >= 0;
  o.reset_position_ids = positions >= 0;
  data::ApplyDocumentMasks(o, 1, seq, ids.data(), (*ex)->targets(),
                           positions >= 0 ? (*ex)->TensorData(positions, false).i32() : nullptr,
                           starts >= 0 ? (*ex)->TensorData(starts, false).i32() : nullptr);
  REQUIRE((*ex)->Forward(0).ok());
  // What the cross-entropy reads: the logits (Gemma 2: after its soft cap).
  int logits = -1;
  for (const NodeInfo& n : (*ex)->graph().nodes)
    if (n.op == "cross_entropy") logits = n.inputs[0];
  REQUIRE(logits >= 0);
  const Tensor l = (*ex)->TensorData(logits, false);
  return std::vector<float>(l.f32(), l.f32() + l.numel());
}

// The largest difference between document B's logits in the packed row and alone.
float LargestDifference(const std::vector<float>& packed, const std::vector<float>& alone) {
  const int64_t v = static_cast<int64_t>(alone.size()) / kAlone;
  float worst = 0.f;
  for (int64_t i = 0; i < kAlone * v; ++i)
    worst = std::max(worst, std::fabs(packed[kFirst * v + i] - alone[i]));
  return worst;
}

class Row final : public data::BatchSource {
 public:
  explicit Row(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  Status Next(int32_t* ids, int32_t* targets) override {
    std::copy(ids_.begin(), ids_.end(), ids);
    for (size_t i = 0; i < ids_.size(); ++i) targets[i] = i + 1 < ids_.size() ? ids_[i + 1] : 2;
    return OkStatus();
  }

 private:
  std::vector<int32_t> ids_;
};

// The mean next-token cross-entropy of `logits` over the positions whose input is not EOD.
double MaskedLoss(const std::vector<float>& logits, const std::vector<int32_t>& ids) {
  const int64_t v = static_cast<int64_t>(logits.size()) / kPacked;
  double sum = 0;
  int n = 0;
  for (int64_t i = 0; i < kPacked; ++i) {
    if (ids[i] == kEod) continue;
    sum += testing::CrossEntropy(logits.data() + i * v, v, i + 1 < kPacked ? ids[i + 1] : 2);
    ++n;
  }
  return sum / n;
}

TEST_CASE("a packed document computes what it computes alone", "[worker][packing]") {
  const std::vector<int32_t> packed = PackedRow();
  const std::vector<int32_t> doc_b(packed.begin() + kFirst, packed.begin() + kFirst + kAlone);
  for (const char* model :
       {"gpt2", "llama", "opt", "gpt_neox", "mistral", "gemma2", "qwen2", "phi3"}) {
    INFO(model);
    auto masked = Model(model, kPacked, true), alone = Model(model, kAlone, false),
         plain = Model(model, kPacked, false);
    INFO(masked.status().ToString() << " " << alone.status().ToString());
    REQUIRE((masked.ok() && alone.ok() && plain.ok()));
    const std::vector<float> b_alone = Logits(**alone, doc_b);
    CHECK(LargestDifference(Logits(**masked, packed), b_alone) < 1e-5f);
    CHECK(LargestDifference(Logits(**plain, packed), b_alone) > 1e-3f);  // the masks matter

    // A training step reads the same masks and leaves EOD's loss out.
    const double want = MaskedLoss(Logits(**masked, packed), packed);
    Row row(packed);
    (*masked)->SetBatchSource(&row);
    auto step = (*masked)->TrainStep();
    REQUIRE(step.ok());
    CHECK(step->loss == Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("packed documents' masks are refused where they cannot hold", "[worker][packing]") {
  const std::string base =
      "train_batch_size: 1\noptimizer: {type: AdamW, params: {lr: 0.01}}\n"
      "model: {family: gpt2, n_layer: 1, n_embd: 16, n_head: 2, vocab_size: 64, "
      "max_seq_len: 16, pad_mask: true}\n";
  auto c = config::ParseJobConfig(base + "data: {reset_attention_mask: true, eod_token: 1}\n",
                                  "job.yaml");
  REQUIRE(c.ok());
  auto g = plan::LoadModelGraph(*c);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("exclude each other") != std::string::npos);
  auto no_eod = config::ParseJobConfig(base + "data: {eod_mask_loss: true}\n", "job.yaml");
  REQUIRE_FALSE(no_eod.ok());
  CHECK(no_eod.status().message().find("data.eod_token") != std::string::npos);
}

}  // namespace
}  // namespace ds::worker
