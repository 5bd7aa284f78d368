#include "runtime/data/format/blend.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <regex>

namespace ds::data {
namespace {

// A number as Megatron's float() takes it (the whole entry), or false.
bool ParseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

StatusOr<Blend> ParseBlend(const std::vector<std::string>& entries) {
  Blend b;
  if (entries.empty()) return InvalidArgumentError("data.path: empty");
  double w = 0;
  bool weighted = entries.size() % 2 == 0;
  for (size_t i = 0; weighted && i < entries.size(); i += 2) weighted = ParseNumber(entries[i], &w);
  if (!weighted) {
    b.prefixes = entries;
    return b;
  }
  double sum = 0;
  for (size_t i = 0; i < entries.size(); i += 2) {
    ParseNumber(entries[i], &w);
    if (!(w > 0))
      return InvalidArgumentError("data.path: the weight of " + entries[i + 1] + " is " +
                                  entries[i] + "; weights must be positive");
    b.weights.push_back(w);
    b.prefixes.push_back(entries[i + 1]);
    sum += w;
  }
  for (double& x : b.weights) x /= sum;
  return b;
}

BlendIndices BuildBlendIndices(const std::vector<double>& weights, int64_t size) {
  BlendIndices ix;
  ix.dataset.resize(size);
  ix.sample.resize(size);
  std::vector<int64_t> given(weights.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    const double x = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = weights[0] * x - static_cast<double>(given[0]);
    for (size_t i = 1; i < weights.size(); ++i) {
      const double error = weights[i] * x - static_cast<double>(given[i]);
      if (error > best_error) {
        best_error = error;
        best = i;
      }
    }
    ix.dataset[s] = static_cast<int16_t>(best);
    ix.sample[s] = given[best]++;
  }
  return ix;
}

std::vector<int64_t> BlendDatasetSamples(const std::vector<double>& weights, int64_t size,
                                         double surplus) {
  std::vector<int64_t> out;
  for (double w : weights)
    out.push_back(static_cast<int64_t>(
        std::ceil(std::ceil(static_cast<double>(size) * w) * (1.0 + surplus))));
  return out;
}

StatusOr<std::vector<SplitRange>> SplitRanges(const std::string& split, int64_t sequences) {
  // megatron-core reads the numbers with re.findall("[.0-9]+") and ignores the rest; a letter
  // is refused here rather than dropped.
  for (char c : split)
    if (std::isalpha(static_cast<unsigned char>(c)))
      return InvalidArgumentError("split \"" + split + "\": '" + std::string(1, c) +
                                  "' is not part of a number");
  std::vector<double> w;
  const std::regex number("[.0-9]+");
  for (auto it = std::sregex_iterator(split.begin(), split.end(), number);
       it != std::sregex_iterator(); ++it) {
    double v = 0;
    if (!ParseNumber(it->str(), &v))
      return InvalidArgumentError("split \"" + split + "\": " + it->str() + " is not a number");
    w.push_back(v);
  }
  if (w.size() > 3) return InvalidArgumentError("split \"" + split + "\": more than three numbers");
  w.resize(3, 0.0);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) return InvalidArgumentError("split \"" + split + "\": every share is zero");
  std::vector<SplitRange> out(3);
  double b0 = 0;
  for (int i = 0; i < 3; ++i) {
    const double b1 = b0 + w[i] / sum;
    if (b1 > b0) {
      out[i].present = true;
      out[i].begin = static_cast<int64_t>(std::nearbyint(b0 * static_cast<double>(sequences)));
      out[i].end = static_cast<int64_t>(std::nearbyint(b1 * static_cast<double>(sequences)));
    }
    b0 = b1;
  }
  return out;
}

}  // namespace ds::data
