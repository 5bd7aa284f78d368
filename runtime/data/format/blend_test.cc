// Blends against megatron-core: BuildBlendIndices against its helpers_cpp.build_blending_indices
// (the arrays below were printed by megatron-core 0.16.1 for these weights), ParseBlend against
// Megatron's --data-path forms.
#include "runtime/data/format/blend.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace ds::data {
namespace {

TEST_CASE("BuildBlendIndices assigns samples as megatron-core does", "[data][megatron]") {
  BlendIndices a = BuildBlendIndices({0.3, 0.7}, 10);
  CHECK(a.dataset == std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1});
  CHECK(a.sample == std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6});
  BlendIndices b = BuildBlendIndices({0.1, 0.25, 0.05, 0.4, 0.2}, 60);
  const std::vector<int16_t> dataset = {3, 1, 4, 0, 3, 1, 3, 4, 2, 3, 1, 3, 4, 0, 3, 1, 3, 4, 1, 3,
                                        0, 3, 1, 4, 3, 1, 3, 4, 2, 3, 1, 3, 4, 0, 3, 1, 3, 4, 1, 3,
                                        0, 3, 1, 4, 3, 1, 3, 4, 2, 3, 1, 3, 4, 0, 3, 1, 3, 4, 1, 3};
  const std::vector<int64_t> sample = {0,  0,  0, 0, 1,  1,  2,  1,  0, 3,  2,  4,  2,  1,  5,
                                       3,  6,  3, 4, 7,  2,  8,  5,  4, 9,  6,  10, 5,  1,  11,
                                       7,  12, 6, 3, 13, 8,  14, 7,  9, 15, 4,  16, 10, 8,  17,
                                       11, 18, 9, 2, 19, 12, 20, 10, 5, 21, 13, 22, 11, 14, 23};
  CHECK(b.dataset == dataset);
  CHECK(b.sample == sample);
  CHECK(BlendDatasetSamples({0.3, 0.7}, 1000) == std::vector<int64_t>{302, 704});
}

TEST_CASE("ParseBlend reads Megatron's data-path forms", "[data][megatron]") {
  StatusOr<Blend> one = ParseBlend({"corpus_text_document"});
  REQUIRE(one.ok());
  CHECK(one->prefixes == std::vector<std::string>{"corpus_text_document"});
  CHECK(one->weights.empty());
  StatusOr<Blend> w = ParseBlend({"3", "a", "7", "b"});
  REQUIRE(w.ok());
  CHECK(w->prefixes == std::vector<std::string>{"a", "b"});
  CHECK(w->weights == std::vector<double>{0.3, 0.7});
  StatusOr<Blend> u = ParseBlend({"a", "b", "c"});
  REQUIRE(u.ok());
  CHECK(u->prefixes.size() == 3);
  CHECK(u->weights.empty());
  const StatusOr<Blend> bad = ParseBlend({"0.5", "a", "0", "b"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("the weight of b is 0") != std::string::npos);
}

// The expected ranges are what megatron-core 0.16.1's parse_and_normalize_split and
// convert_split_vector_to_split_matrix give with int(round(b * S)).
TEST_CASE("SplitRanges reads Megatron's split strings", "[data][megatron]") {
  StatusOr<std::vector<SplitRange>> a = SplitRanges("969, 30, 1", 1000);
  REQUIRE(a.ok());
  CHECK(((*a)[0].begin == 0 && (*a)[0].end == 969));
  CHECK(((*a)[1].begin == 969 && (*a)[1].end == 999));
  CHECK(((*a)[2].begin == 999 && (*a)[2].end == 1000));
  // The golden GPTDataset's split: train [0, 360) of 400.
  StatusOr<std::vector<SplitRange>> b = SplitRanges("90,8,2", 400);
  REQUIRE(b.ok());
  CHECK((*b)[0].end == 360);
  CHECK(((*b)[1].begin == 360 && (*b)[1].end == 392));
  // Padded with zeros: no test split; half to even: 0.5 * 5 = 2.5 -> 2.
  StatusOr<std::vector<SplitRange>> c = SplitRanges("1,1", 5);
  REQUIRE(c.ok());
  CHECK((*c)[0].end == 2);
  CHECK_FALSE((*c)[2].present);
  CHECK(SplitRanges("1,2,3,4", 10).status().code() == StatusCode::kInvalidArgument);
  CHECK(SplitRanges("0,0,0", 10).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::data
