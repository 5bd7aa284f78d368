// Generation against the full forward (GPT-2, Llama with grouped-query attention and GPT-2 with
// dropless experts, random weights): the cached decode's logits equal the training graph's at every
// step (1e-5), a left-padded sequence (0, 1 and 31 pads) computes what it computes alone, greedy
// output is the full recompute's argmax chain, sampling repeats under a seed, and bad prompts are
// refused.
#include "runtime/generate/generator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "runtime/graph/model_builder.h"

namespace ds::generate {
namespace {

struct Model {
  Graph graph;
  std::unique_ptr<zero::ParamStore> params;
  int logits = -1;
};

// "gpt2", "llama" (grouped-query attention) or "moe" (GPT-2 with dropless top-2 experts, whose
// routing is the full forward's token by token).
Model Make(const std::string& family) {
  ModelSpec s = ModelPreset(family == "llama" ? "llama-tiny" : "gpt2-tiny").value();
  s.max_seq_len = 64;
  if (family == "moe") {
    s.moe.num_experts = 4;
    s.moe.top_k = 2;
    s.moe.drop_tokens = false;
    s.moe.second_expert = "argmax";
  }
  Model m;
  m.graph = BuildModelGraph(s).value();
  m.params = std::make_unique<zero::ParamStore>(m.graph, DType::kF32);
  m.params->Initialize(m.graph, /*seed=*/3);
  for (const NodeInfo& n : m.graph.nodes)
    if (n.op == "cross_entropy") m.logits = n.inputs[0];
  return m;
}

std::vector<int32_t> Tokens(int n, int seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// The training graph's logits of one sequence, every position: [len, vocab].
std::vector<float> FullLogits(const Model& m, const std::vector<int32_t>& tokens, int64_t vocab) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  auto ex = exec::Executor::Create(m.graph, m.params.get(), {1, len, false});
  REQUIRE(ex.ok());
  std::copy(tokens.begin(), tokens.end(), (*ex)->ids());
  std::fill((*ex)->targets(), (*ex)->targets() + len, 0);
  REQUIRE((*ex)->Forward(0).ok());
  const float* p = (*ex)->TensorData(m.logits, false).f32();
  return std::vector<float>(p, p + len * vocab);
}

// Largest |a - b| relative to max(1, |b|).
double Diff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(double{b[i]})));
  return worst;
}

TEST_CASE("generate: cached decode equals the full forward at every step", "[generate]") {
  for (const char* family : {"gpt2", "llama", "moe"}) {
    INFO(family);
    const Model m = Make(family);
    auto gen = Generator::Create(m.graph, m.params.get(), {2, 48});
    REQUIRE(gen.ok());
    Generator& g = **gen;
    const int64_t v = g.vocab();
    const std::vector<int32_t> seq = Tokens(40, 1, static_cast<int>(v));
    const std::vector<float> full = FullLogits(m, seq, v);
    REQUIRE(g.Prefill({std::vector<int32_t>(seq.begin(), seq.begin() + 8)}, 0).ok());
    for (int64_t t = 8; t <= 40; ++t) {
      INFO("after " << t << " tokens");
      CHECK(Diff(g.Logits(0), full.data() + (t - 1) * v, v) <= 1e-5);
      if (t < 40) REQUIRE(g.Decode({seq[t]}).ok());
    }
  }
}

TEST_CASE("generate: left padding computes what the sequence computes alone", "[generate]") {
  for (const char* family : {"gpt2", "llama"}) {
    INFO(family);
    const Model m = Make(family);
    auto gen = Generator::Create(m.graph, m.params.get(), {4, 48});
    REQUIRE(gen.ok());
    Generator& g = **gen;
    const int64_t v = g.vocab();
    // 0, 1 and 31 pads before the shorter prompts.
    const std::vector<std::vector<int32_t>> prompts = {Tokens(40, 2, v), Tokens(39, 3, v),
                                                       Tokens(9, 4, v), Tokens(40, 5, v)};
    REQUIRE(g.Prefill(prompts, 0).ok());
    std::vector<std::vector<float>> batched;
    const std::vector<int32_t> next = {7, 11, 13, 17};
    for (int step = 0; step < 3; ++step) {
      for (int b = 0; b < 4; ++b) batched.emplace_back(g.Logits(b), g.Logits(b) + v);
      if (step < 2) REQUIRE(g.Decode(next).ok());
    }
    for (int b = 0; b < 4; ++b) {
      INFO("prompt " << b << " of " << prompts[b].size() << " tokens");
      REQUIRE(g.Prefill({prompts[b]}, 0).ok());
      for (int step = 0; step < 3; ++step) {
        CHECK(Diff(batched[step * 4 + b].data(), g.Logits(0), v) <= 1e-5);
        if (step < 2) REQUIRE(g.Decode({next[b]}).ok());
      }
    }
  }
}

TEST_CASE("generate: greedy follows the full forward's argmax; sampling repeats under a seed",
          "[generate]") {
  const Model m = Make("llama");
  auto gen = Generator::Create(m.graph, m.params.get(), {2, 48});
  REQUIRE(gen.ok());
  GenerateRequest r;
  r.prompts = {Tokens(5, 6, 64), Tokens(12, 7, 64)};
  r.max_new_tokens = 10;
  auto out = (*gen)->Generate(r);
  REQUIRE(out.ok());
  for (size_t b = 0; b < 2; ++b) {
    std::vector<int32_t> seq = r.prompts[b];
    for (int32_t t : out->tokens[b]) {  // recompute from scratch and take the argmax
      const std::vector<float> full = FullLogits(m, seq, 64);
      const float* last = full.data() + (seq.size() - 1) * 64;
      CHECK(t == std::max_element(last, last + 64) - last);
      seq.push_back(t);
    }
  }
  CHECK(out->prefill_tokens == 17);
  CHECK(out->decode_tokens == 18);
  // A stop token ends a sequence; the other goes on.
  r.stop_tokens = {out->tokens[0][2]};
  auto stopped = (*gen)->Generate(r);
  REQUIRE(stopped.ok());
  for (size_t b = 0; b < 2; ++b) {  // each the unstopped run, cut after its first stop token
    const std::vector<int32_t>& all = out->tokens[b];
    auto end = std::find(all.begin(), all.end(), r.stop_tokens[0]);
    CHECK(stopped->tokens[b] ==
          std::vector<int32_t>(all.begin(), end == all.end() ? end : end + 1));
  }
  r.stop_tokens.clear();
  r.sampling.greedy = false;
  r.sampling.top_k = 8;
  r.sampling.seed = 42;
  auto a = (*gen)->Generate(r), b = (*gen)->Generate(r);
  REQUIRE((a.ok() && b.ok()));
  CHECK(a->tokens == b->tokens);
}

TEST_CASE("generate: bad prompts are refused before any compute", "[generate]") {
  const Model m = Make("gpt2");
  auto gen = Generator::Create(m.graph, m.params.get(), {2, 16});
  REQUIRE(gen.ok());
  GenerateRequest r;
  r.prompts = {Tokens(12, 1, 64)};
  r.max_new_tokens = 8;
  auto s = (*gen)->Generate(r);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("exceed the context of 16") != std::string::npos);
  r.prompts = {{}};
  CHECK((*gen)->Generate(r).status().message().find("prompt 0 is empty") != std::string::npos);
  r.prompts = {{1, 2, 99}};
  CHECK((*gen)->Generate(r).status().message().find("outside the vocabulary") != std::string::npos);
  r.prompts = {{1}, {2}, {3}};
  CHECK((*gen)->Generate(r).status().message().find("3 prompts") != std::string::npos);
  CHECK_FALSE(Generator::Create(m.graph, m.params.get(), {1, 100}).ok());  // wpe has 64 rows
}

}  // namespace
}  // namespace ds::generate
