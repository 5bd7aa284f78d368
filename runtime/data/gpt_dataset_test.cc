// The GPTDataset port against megatron-core's GPTDataset (testdata/megatron/gpt_golden.txt,
// tools/megatron_gpt_golden.py): the document, sample and shuffle indices and the first 40
// samples, for three epochs with a separate final epoch (seq_len 16) and for one (seq_len 64).
#include "runtime/data/gpt_dataset.h"

#include "runtime/data/megatron_samples.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ds::data {
namespace {

struct GoldenCase {
  int64_t seq_len = 0, samples = 0, length = 0;
  std::map<std::string, std::vector<int64_t>> arrays;
  std::vector<std::vector<int64_t>> items;
};

// Cases "case ..." and, last, the blend "blend ..." (same layout, items only).
std::vector<GoldenCase> ReadGolden() {
  std::ifstream in("runtime/data/testdata/megatron/gpt_golden.txt");
  REQUIRE(in);
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string name;
    s >> name;
    if (name == "case" || name == "blend") {
      cases.emplace_back();
      s >> cases.back().seq_len >> cases.back().samples >> cases.back().length;
      continue;
    }
    if (name.empty() || name[0] == '#') continue;
    int64_t n = 0;
    s >> n;
    std::vector<int64_t> v(n);
    for (int64_t& x : v) s >> x;
    if (name == "item")
      cases.back().items.push_back(v);
    else
      cases.back().arrays[name] = v;
  }
  return cases;
}

template <typename T>
std::vector<int64_t> Widen(const std::vector<T>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

TEST_CASE("numpy's legacy RandomState(1234): MT19937 and shuffle", "[data][megatron]") {
  LegacyRandomState rng(1234);
  // numpy: np.random.RandomState(1234).randint(0, 2**32, 3, dtype=np.uint64) draws these
  // as 32-bit outputs (the first three genrand_int32 values of seed 1234).
  CHECK(rng.Next() == 822569775u);
  CHECK(rng.Next() == 2137449171u);
  CHECK(rng.Next() == 2671936806u);
}

TEST_CASE("GPTDataset indices and samples equal megatron-core's", "[data][megatron]") {
  StatusOr<IndexedDataset> d = IndexedDataset::Open("runtime/data/testdata/megatron/gpt_docs");
  REQUIRE(d.ok());
  const std::vector<GoldenCase> cases = ReadGolden();
  REQUIRE(cases.size() == 4);
  // "90,8,2" over 400 sequences: train is [0, round(0.9 * 400)) = [0, 360).
  for (size_t c = 0; c < 2; ++c) {
    const GoldenCase& g = cases[c];
    CAPTURE(g.seq_len);
    StatusOr<GptIndices> ix = BuildGptIndices(*d, {0, 360}, g.samples, g.seq_len, 1234);
    REQUIRE(ix.ok());
    CHECK(ix->samples() == g.length);
    CHECK(Widen(ix->document_index) == g.arrays.at("document_index"));
    CHECK(ix->sample_index == g.arrays.at("sample_index"));
    CHECK(ix->shuffle_index == g.arrays.at("shuffle_index"));
    std::vector<int64_t> tokens;
    for (size_t k = 0; k < g.items.size(); ++k) {
      CAPTURE(k);
      REQUIRE(GptSample(*d, *ix, static_cast<int64_t>(k), &tokens).ok());
      CHECK(tokens == g.items[k]);
    }
  }
  CHECK(cases[0].arrays.at("document_index").size() == 3 * 360);  // three epochs
}

TEST_CASE(
    "MegatronSamples: one prefix, a 0.3 / 0.7 blend and an unweighted one equal "
    "megatron-core's",
    "[data][megatron]") {
  const std::vector<GoldenCase> cases = ReadGolden();
  const std::string a = "runtime/data/testdata/megatron/gpt_docs";
  const std::string b = "runtime/data/testdata/megatron/gpt_docs_b";
  MegatronSamples::Options o;
  o.split = "90,8,2";
  o.seq_len = 16;
  o.data_path = {a};
  o.num_samples = 1500;
  StatusOr<MegatronSamples> one = MegatronSamples::Open(o);
  REQUIRE(one.ok());
  CHECK(one->size() == cases[0].length);
  std::vector<int64_t> tokens;
  for (size_t k = 0; k < cases[0].items.size(); ++k) {
    REQUIRE(one->Sample(static_cast<int64_t>(k), &tokens).ok());
    CHECK(tokens == cases[0].items[k]);
  }
  o.data_path = {"0.3", a, "0.7", b};
  o.num_samples = 100;
  StatusOr<MegatronSamples> blend = MegatronSamples::Open(o);
  REQUIRE(blend.ok());
  CHECK(blend->size() == cases[2].length);
  for (size_t k = 0; k < cases[2].items.size(); ++k) {
    CAPTURE(k);
    REQUIRE(blend->Sample(static_cast<int64_t>(k), &tokens).ok());
    CHECK(tokens == cases[2].items[k]);
  }
  // Unweighted: each dataset one epoch, weighed by its size.
  o.data_path = {a, b};
  StatusOr<MegatronSamples> sized = MegatronSamples::Open(o);
  REQUIRE(sized.ok());
  CHECK(sized->size() == cases[3].length);
  for (size_t k = 0; k < cases[3].items.size(); ++k) {
    CAPTURE(k);
    REQUIRE(sized->Sample(static_cast<int64_t>(k), &tokens).ok());
    CHECK(tokens == cases[3].items[k]);
  }
}

TEST_CASE("an empty split asked for samples is refused, not looped on", "[data][megatron]") {
  StatusOr<IndexedDataset> d = IndexedDataset::Open("runtime/data/testdata/megatron/gpt_docs");
  REQUIRE(d.ok());
  StatusOr<GptIndices> ix = BuildGptIndices(*d, {400, 400}, 2, 16, 1234);
  REQUIRE_FALSE(ix.ok());
  CHECK(ix.status().message().find("[400, 400) holds 0 tokens and is asked for 2 samples") !=
        std::string::npos);
}

}  // namespace
}  // namespace ds::data
