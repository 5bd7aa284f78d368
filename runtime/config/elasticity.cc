#include "runtime/config/elasticity.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace ds::config {
namespace {

// The highly composite numbers up to 720720 (DeepSpeed's table: each has more divisors than
// every smaller number).
constexpr int64_t kHighlyComposite[] = {
    1,      2,      4,      6,      12,     24,     36,     48,    60,    120,
    180,    240,    360,    720,    840,    1260,   1680,   2520,  5040,  7560,
    10080,  15120,  20160,  25200,  27720,  45360,  50400,  55440, 83160, 110880,
    166320, 221760, 277200, 332640, 498960, 554400, 665280, 720720};

// b times the largest highly composite number that keeps the product <= max (b itself when b >=
// max).
int64_t Candidate(int64_t base, int64_t max) {
  if (base >= max) return base;
  const int64_t room = max / base;
  int64_t h = 1;
  for (int64_t v : kHighlyComposite)
    if (v <= room) h = v;
  return base * h;
}

}  // namespace

std::vector<int64_t> ValidSizes(int64_t b, const std::vector<int64_t>& micros, int64_t min,
                                int64_t max) {
  std::set<int64_t> sizes;
  for (int64_t m : micros) {
    if (m <= 0 || b % m != 0) continue;
    const int64_t top = b / m;
    if (top >= min && top <= max) sizes.insert(top);
    for (int64_t i = 1; i <= top / 2 && i <= max; ++i)
      if (i >= min && top % i == 0) sizes.insert(i);
  }
  return {sizes.begin(), sizes.end()};
}

StatusOr<ElasticBatch> ComputeElasticBatch(const ElasticityConfig& e) {
  std::vector<int64_t> bases = e.micro_batch_sizes;
  int64_t lcm = 1;
  for (int64_t m : e.micro_batch_sizes) lcm = std::lcm(lcm, m);
  bases.push_back(lcm);
  ElasticBatch best;
  for (int64_t base : bases) {
    const int64_t b = Candidate(base, e.max_train_batch_size);
    std::vector<int64_t> sizes = ValidSizes(b, e.micro_batch_sizes, e.min_gpus, e.max_gpus);
    const bool more = sizes.size() > best.valid_sizes.size();
    const bool tie =
        !sizes.empty() && sizes.size() == best.valid_sizes.size() &&
        (e.prefer_larger_batch ? b > best.train_batch_size : b < best.train_batch_size);
    if (more || tie) best = {b, std::move(sizes)};
  }
  if (best.valid_sizes.empty()) {
    std::string micros;
    for (int64_t m : e.micro_batch_sizes)
      micros += (micros.empty() ? "" : ", ") + std::to_string(m);
    return InvalidArgumentError(
        "elasticity: no train_batch_size up to max_train_batch_size " +
        std::to_string(e.max_train_batch_size) + " with micro_batch_sizes [" + micros +
        "] runs at any data-parallel size in [" + std::to_string(e.min_gpus) + ", " +
        std::to_string(e.max_gpus) + "] (min_gpus, max_gpus)");
  }
  return best;
}

}  // namespace ds::config
