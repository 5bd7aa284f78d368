// The sampler against its definition: greedy is the first argmax; temperature, top-k and top-p
// keep exactly the tokens Hugging Face's warpers keep (min_tokens_to_keep included) and draws
// never leave that set; the repetition penalty moves held tokens as CTRL's does; a seed gives
// the same draws every time.
#include "runtime/generate/sampler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <vector>

namespace ds::generate {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, -4.0f};

SamplingOptions Draw() {
  SamplingOptions o;
  o.greedy = false;
  return o;
}

TEST_CASE("sampler: greedy takes the first largest logit", "[generate]") {
  SamplingOptions o;
  const Candidates c = Process(kLogits.data(), 8, o, {});
  REQUIRE(c.tokens == std::vector<int32_t>{1});
  CHECK(Sample(kLogits.data(), 8, o, {}, 0, 0) == 1);
  o.repetition_penalty = 2.0f;  // 3 / 2 < 2.5: token 6 wins once 1 and 3 are held
  CHECK(Sample(kLogits.data(), 8, o, {1, 3, 3}, 0, 0) == 6);
  CHECK(Sample(kLogits.data(), 8, o, {1}, 0, 0) == 3);
}

TEST_CASE("sampler: top-k and top-p keep Hugging Face's sets", "[generate]") {
  SamplingOptions o = Draw();
  o.top_k = 3;  // 3, 3, 2.5: tokens 1 and 3 tie, by id
  Candidates c = Process(kLogits.data(), 8, o, {});
  CHECK(c.tokens == std::vector<int32_t>{1, 3, 6});
  double sum = 0;
  for (double p : c.probs) sum += p;
  CHECK(sum == Approx(1.0));
  const double e = std::exp(-0.5);
  CHECK(c.probs[2] == Approx(e / (2 + e)));
  o.min_tokens_to_keep = 5;
  CHECK(Process(kLogits.data(), 8, o, {}).tokens.size() == 5);
  // Top-p over the softmax of everything: a token stays while those above it hold < top_p.
  o = Draw();
  std::vector<double> p;
  double z = 0;
  for (float x : kLogits) z += std::exp(x);
  for (float x : kLogits) p.push_back(std::exp(x) / z);
  o.top_p = static_cast<float>(p[1] + p[3] - 1e-3);  // the two 3s reach it: 6 is out
  CHECK(Process(kLogits.data(), 8, o, {}).tokens == std::vector<int32_t>{1, 3});
  o.top_p = static_cast<float>(p[1] + p[3] + 1e-3);
  CHECK(Process(kLogits.data(), 8, o, {}).tokens == std::vector<int32_t>{1, 3, 6});
  o.top_p = 0.01f;
  CHECK(Process(kLogits.data(), 8, o, {}).tokens == std::vector<int32_t>{1});
  o.min_tokens_to_keep = 2;
  CHECK(Process(kLogits.data(), 8, o, {}).tokens == std::vector<int32_t>{1, 3});
  // Temperature sharpens before the cut.
  o = Draw();
  o.temperature = 0.5f;
  c = Process(kLogits.data(), 8, o, {});
  CHECK(c.probs[0] / c.probs[2] == Approx(std::exp(1.0)));  // (3 - 2.5) / 0.5
}

TEST_CASE("sampler: draws stay in the kept set and follow its probabilities", "[generate]") {
  for (int mode = 0; mode < 2; ++mode) {
    SamplingOptions o = Draw();
    if (mode == 0) o.top_k = 3;
    if (mode == 1) o.top_p = 0.6f;
    o.seed = 11;
    const Candidates c = Process(kLogits.data(), 8, o, {});
    const std::set<int32_t> kept(c.tokens.begin(), c.tokens.end());
    std::map<int32_t, int> seen;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) {
      const int32_t t = Sample(kLogits.data(), 8, o, {}, i / 4, i % 4);
      REQUIRE(kept.count(t));
      ++seen[t];
    }
    for (size_t i = 0; i < c.tokens.size(); ++i)
      CHECK(seen[c.tokens[i]] / static_cast<double>(draws) == Approx(c.probs[i]).margin(0.015));
  }
}

TEST_CASE("sampler: a seed fixes the draws, whatever else is drawn", "[generate]") {
  SamplingOptions o = Draw();
  o.seed = 5;
  std::vector<int32_t> a, b, other;
  for (int step = 0; step < 50; ++step) {
    a.push_back(Sample(kLogits.data(), 8, o, {}, step, 2));
    b.push_back(Sample(kLogits.data(), 8, o, {}, step, 2));
  }
  CHECK(a == b);
  o.seed = 6;
  for (int step = 0; step < 50; ++step) other.push_back(Sample(kLogits.data(), 8, o, {}, step, 2));
  CHECK(a != other);
}

TEST_CASE("sampler: options out of range are refused by name", "[generate]") {
  SamplingOptions o;
  o.temperature = 0;
  CHECK(CheckSamplingOptions(o).message().find("temperature") != std::string::npos);
  o = SamplingOptions();
  o.top_p = 1.5f;
  CHECK(CheckSamplingOptions(o).message().find("top_p") != std::string::npos);
  o = SamplingOptions();
  o.top_k = -1;
  CHECK(CheckSamplingOptions(o).message().find("top_k") != std::string::npos);
  CHECK(CheckSamplingOptions(SamplingOptions()).ok());
}

}  // namespace
}  // namespace ds::generate
