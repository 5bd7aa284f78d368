// Generation from the trainer's own layout (Trainer::MakeGenerator): a model trained with tensor
// parallelism generates on its tp ranks, each with its query heads, the kv heads they read
// (its KV caches hold only those) and its vocabulary rows, the logits all-gathered so every
// rank samples the same tokens. The steps are checked against one rank generating from the
// checkpoint the TP job saved: the same logits (1e-5) and the same tokens, under ZeRO-3 too.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/generate/generator.h"
#include "runtime/worker/tiny_gpt_job.h"
#include "runtime/worker/trainer_testing.h"

namespace ds::worker {
namespace {

struct Generated {
  std::vector<std::vector<float>> logits;  // per prompt: the prefill's next-token logits
  std::vector<std::vector<int32_t>> tokens;
  int64_t cache_heads = 0;  // layer 0's kv heads on this rank
};

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 4, 5}, {7, 9}, {30}};

// Trainer `t`'s generator: the prefill logits of every prompt, then 6 greedy tokens each.
StatusOr<Generated> Generate(Trainer& t) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<generate::Generator> gen, t.MakeGenerator(4, 16));
  Generated out;
  out.cache_heads = gen->info().layers.at(0).n_kv_head;
  DS_RETURN_IF_ERROR(gen->Prefill(kPrompts, 0));
  for (size_t b = 0; b < kPrompts.size(); ++b)
    out.logits.emplace_back(gen->Logits(b), gen->Logits(b) + gen->vocab());
  generate::GenerateRequest r;
  r.prompts = kPrompts;
  r.max_new_tokens = 6;
  DS_ASSIGN_OR_RETURN(generate::GenerateResult res, gen->Generate(r));
  out.tokens = res.tokens;
  return out;
}

// Every rank of a `world`-rank job at tp `tp` generates after `steps` steps (rank 0's result;
// every rank's tokens CHECKed equal to it).
Generated OnLayout(const std::string& yaml, int world, int tp, int steps) {
  std::vector<Generated> got(world);
  const std::vector<Status> errors =
      testing::OnRanks(world, [&](int r, parallel::Communicator* comm) -> Status {
        DS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, testing::MakeTrainer(yaml, comm, tp));
        DS_RETURN_IF_ERROR(t->Initialize());
        for (int i = 0; i < steps; ++i) DS_RETURN_IF_ERROR(t->TrainStep().status());
        if (steps > 0) DS_RETURN_IF_ERROR(t->SaveCheckpoint());
        DS_ASSIGN_OR_RETURN(got[r], Generate(*t));
        return OkStatus();
      });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r].ToString());
    REQUIRE(errors[r].ok());
    CHECK(got[r].tokens == got[0].tokens);  // the same samples on every rank
  }
  return got[0];
}

void CheckSame(const Generated& want, const Generated& got) {
  REQUIRE(got.logits.size() == want.logits.size());
  for (size_t b = 0; b < want.logits.size(); ++b) {
    REQUIRE(got.logits[b].size() == want.logits[b].size());
    double worst = 0;
    for (size_t v = 0; v < want.logits[b].size(); ++v)
      worst = std::max(worst, std::abs(double(got.logits[b][v]) - want.logits[b][v]));
    INFO("prompt " << b);
    CHECK(worst < 1e-5);
  }
  CHECK(got.tokens == want.tokens);
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  CHECK(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  return dir;
}

TEST_CASE("Generation: tensor-parallel ranks generate what one rank does from their checkpoint",
          "[worker][generate][tp]") {
  const std::string data = testing::WriteTinyTokens("generate_tp.tok");
  struct Layout {
    const char* name;
    std::string model;  // replaces "n_head: 4"
    int world, tp, stage, heads;
  };
  const Layout layouts[] = {
      {"GPT-2 TP 2", "n_head: 4", 2, 2, 1, 2},
      {"GPT-2 TP 2 x DP 2, ZeRO-3", "n_head: 4", 4, 2, 3, 2},
      {"Llama GQA TP 2", "n_head: 4, n_kv_head: 2", 2, 2, 1, 1},
      {"Llama GQA TP 4 (kv heads shared by 2 ranks)", "n_head: 4, n_kv_head: 2", 4, 4, 0, 1},
  };
  for (const Layout& l : layouts) {
    INFO(l.name);
    std::string yaml = testing::TinyGptJob(data, 8 / (l.world / l.tp), l.stage, "cpu");
    yaml.replace(yaml.find("n_head: 4"), 9, l.model);
    if (l.model.find("kv") != std::string::npos)
      yaml.replace(yaml.find("family: gpt2"), 12, "family: llama");
    const std::string dir = Dir("generate_tp_ckpt");
    const Generated tp = OnLayout(yaml + "checkpoint: {dir: " + dir + "}\n", l.world, l.tp, 3);
    CHECK(tp.cache_heads == l.heads);
    std::string one = yaml + "checkpoint: {dir: " + dir + ", load: latest}\n";
    one.replace(one.find("stage: " + std::to_string(l.stage)), 8, "stage: 0");
    const Generated single = OnLayout(one, 1, 1, 0);
    CHECK(single.cache_heads == (l.model.find("kv") != std::string::npos ? 2 : 4));
    CheckSame(single, tp);
  }
}

}  // namespace
}  // namespace ds::worker
