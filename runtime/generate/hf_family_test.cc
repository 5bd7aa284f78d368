// Every Hugging Face family against transformers (testdata/families, made by
// tools/hf_family_golden.py from tiny random models saved as transformers saves them, several of
// them sharded, one in bf16): ds-generate's loader reads the folder, the logits of the whole
// prompt's prefill and of every position fed one token at a time through the KV caches agree
// with transformers' forward within 1e-4, and greedy generation equals generate() token for
// token. Dynamic RoPE depends on the call's length (transformers recomputes it per forward), so
// its per-position check is the prefill's last position only.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/generate/generate_testing.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/hf_model.h"

namespace ds::generate {
namespace {

using testing::Ints;
using testing::ReadText;
using testing::TestData;

const char* const kCases[] = {"llama-linear", "llama-dynamic", "llama3-tied", "llama-yarn",
                              "llama-bf16",   "mistral",       "qwen2",       "qwen3",
                              "phi3",         "opt",           "opt-post",    "gpt_neox",
                              "gpt_neox-seq", "gemma",         "gemma2"};

// Largest |ours - theirs| over the vocabulary.
double MaxDiff(const float* ours, const Json& theirs) {
  double worst = 0;
  const auto& v = theirs.items();
  for (size_t i = 0; i < v.size(); ++i)
    worst = std::max(worst, std::abs(double(ours[i]) - v[i].as_double()));
  return worst;
}

TEST_CASE("hf families: logits and greedy tokens equal transformers'", "[generate][hf]") {
  for (const char* name : kCases) {
    const std::string dir = TestData(std::string("families/") + name);
    auto doc = ParseJson(ReadText(dir + "/golden.json"));
    REQUIRE(doc.ok());
    INFO(name << " (" << doc->Find("model_type")->as_string() << ", transformers "
              << doc->Find("transformers")->as_string() << ")");
    auto m = LoadHfModel(dir);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    // Cache slots for the prompt and the new tokens: dynamic RoPE's case runs past its
    // max_position_embeddings (8), which RoPE allows.
    auto gen = Generator::Create(m->graph, m->params.get(), {4, 32});
    INFO(gen.status().ToString());
    REQUIRE(gen.ok());
    const std::vector<int32_t> prompt = Ints(*doc->Find("prompt"));
    const auto& logits = doc->Find("logits")->items();
    REQUIRE(logits.size() == prompt.size());
    Status prefill = (*gen)->Prefill({prompt}, 0);
    INFO(prefill.ToString());
    REQUIRE(prefill.ok());
    CHECK(MaxDiff((*gen)->Logits(0), logits.back()) <= 1e-4);
    if (m->spec.arch.rope.type != "dynamic") {
      REQUIRE((*gen)->Prefill({{prompt[0]}}, 0).ok());
      for (size_t t = 0; t < prompt.size(); ++t) {
        INFO("position " << t);
        if (t > 0) REQUIRE((*gen)->Decode({prompt[t]}).ok());
        CHECK(MaxDiff((*gen)->Logits(0), logits[t]) <= 1e-4);
      }
    }
    GenerateRequest r;
    r.prompts = {prompt};
    r.max_new_tokens = doc->Find("max_new_tokens")->as_int();
    auto out = (*gen)->Generate(r);
    REQUIRE(out.ok());
    CHECK(out->tokens[0] == Ints(*doc->Find("greedy")));
  }
}

}  // namespace
}  // namespace ds::generate
