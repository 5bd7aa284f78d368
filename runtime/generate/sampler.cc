#include "runtime/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

namespace ds::generate {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform number in [0, 1) from (seed, step, sequence) alone.
double Uniform(uint64_t seed, int64_t step, int64_t sequence) {
  const uint64_t h = SplitMix(SplitMix(SplitMix(seed) ^ static_cast<uint64_t>(step)) ^
                              static_cast<uint64_t>(sequence));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

}  // namespace

Status CheckSamplingOptions(const SamplingOptions& o) {
  auto bad = [](const std::string& what) { return InvalidArgumentError("sampling: " + what); };
  if (!(o.temperature > 0)) return bad("temperature must be > 0");
  if (o.top_k < 0) return bad("top_k must be >= 0 (0: off)");
  if (!(o.top_p > 0 && o.top_p <= 1)) return bad("top_p must be in (0, 1]");
  if (o.min_tokens_to_keep < 1) return bad("min_tokens_to_keep must be >= 1");
  if (!(o.repetition_penalty > 0)) return bad("repetition_penalty must be > 0");
  return OkStatus();
}

Candidates Process(const float* logits, int64_t vocab, const SamplingOptions& o,
                   const std::vector<int32_t>& held) {
  Candidates c;
  if (o.greedy && o.repetition_penalty == 1.0f) {  // the first largest, as torch.argmax
    c.tokens = {static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits)};
    c.probs = {1.0};
    return c;
  }
  std::vector<double> x(logits, logits + vocab);
  if (o.repetition_penalty != 1.0f)
    for (int32_t t : std::set<int32_t>(held.begin(), held.end()))
      if (t >= 0 && t < vocab)
        x[t] = x[t] > 0 ? x[t] / o.repetition_penalty : x[t] * o.repetition_penalty;
  if (o.greedy) {
    c.tokens = {static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin())};
    c.probs = {1.0};
    return c;
  }
  for (double& v : x) v /= o.temperature;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  int64_t keep = vocab;
  if (o.top_k > 0) keep = std::min(vocab, std::max(o.top_k, o.min_tokens_to_keep));
  const double top = x[order[0]];
  std::vector<double> p(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i] = std::exp(x[order[i]] - top);
  // Top-p: a token stays while the tokens ranked above it hold less than top_p.
  if (o.top_p < 1.0f) {
    double above = 0;
    int64_t n = 0;
    while (n < keep && (n < o.min_tokens_to_keep || above < o.top_p * sum)) above += p[n++];
    keep = n;
  }
  sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i];
  c.tokens.assign(order.begin(), order.begin() + keep);
  c.probs.resize(keep);
  for (int64_t i = 0; i < keep; ++i) c.probs[i] = p[i] / sum;
  return c;
}

int32_t Sample(const float* logits, int64_t vocab, const SamplingOptions& o,
               const std::vector<int32_t>& held, int64_t step, int64_t sequence) {
  const Candidates c = Process(logits, vocab, o, held);
  if (c.tokens.size() == 1) return c.tokens[0];
  const double u = Uniform(o.seed, step, sequence);
  double at = 0;
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    at += c.probs[i];
    if (u < at) return c.tokens[i];
  }
  return c.tokens.back();  // rounding: u past the last partial sum
}

}  // namespace ds::generate
