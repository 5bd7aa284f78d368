// Deterministic random numbers for data order: the same seed gives the same sequence on
// every platform and standard library (std::uniform_int_distribution and std::shuffle are
// implementation-defined, std::mt19937_64's output is not).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ds::data {

// SplitMix64's finalizer: spreads nearby seeds (1, 2, 3 ...) over the whole 64-bit range.
inline uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, n), n >= 1, by rejection (no modulo bias).
inline uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // largest multiple of n, exclusive
  uint64_t r = rng();
  while (r >= limit) r = rng();
  return r % n;
}

// Fisher-Yates over the whole vector.
template <typename T>
void DeterministicShuffle(std::mt19937_64& rng, std::vector<T>* v) {
  for (size_t i = v->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace ds::data
