// Greedy generation token for token against Hugging Face transformers' generate(): random-weight
// GPT-2 and Llama (grouped-query attention) models, their weights and transformers' output in
// testdata/ (made by tools/hf_generate_golden.py, which anyone can run again). The Hugging Face
// directories load through LoadHfModel (config.json, the importer); each prompt alone and the
// prompts as one left-padded batch give transformers' tokens, and the first step's logits agree to
// 1e-4.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/base/json.h"
#include "runtime/generate/generate_testing.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/hf_model.h"

namespace ds::generate {
namespace {

using testing::Golden;
using testing::Ints;
using testing::TestData;

TEST_CASE("generate: greedy tokens equal transformers' generate", "[generate][hf]") {
  const Json golden = Golden("hf_golden.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const Json& p : golden.Find("prompts")->items()) prompts.push_back(Ints(p));
  const int64_t new_tokens = golden.Find("new_tokens")->as_int();
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family << " (transformers " << golden.Find("transformers")->as_string() << ")");
    const Json& g = *golden.Find(family);
    auto m = LoadHfModel(TestData(family));
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    auto gen = Generator::Create(m->graph, m->params.get(), {4, 0});
    REQUIRE(gen.ok());
    GenerateRequest r;
    r.max_new_tokens = new_tokens;
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("prompt " << i << " alone");
      REQUIRE((*gen)->Prefill({prompts[i]}, 0).ok());
      const auto& logits = g.Find("first_logits")->items()[i].items();
      for (size_t v = 0; v < logits.size(); ++v)
        CHECK(std::abs((*gen)->Logits(0)[v] - logits[v].as_double()) <= 1e-4);
      r.prompts = {prompts[i]};
      auto out = (*gen)->Generate(r);
      REQUIRE(out.ok());
      CHECK(out->tokens[0] == Ints(g.Find("alone")->items()[i]));
    }
    INFO("the prompts as one left-padded batch");
    r.prompts = prompts;
    auto out = (*gen)->Generate(r);
    REQUIRE(out.ok());
    for (size_t i = 0; i < prompts.size(); ++i)
      CHECK(out->tokens[i] == Ints(g.Find("batched")->items()[i]));
  }
}

}  // namespace
}  // namespace ds::generate
