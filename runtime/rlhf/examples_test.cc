// The RLHF rows: SFT targets on the answer only (the prompt and padding ignored), reward pairs
// scored at each sequence's last token, truncation at seq; and their batches: a reward
// micro-batch is its chosen rows then their rejected rows, ranks take disjoint items, an epoch
// ends when a whole step no longer fits, and Seek resumes the same stream.
#include <catch2/catch.hpp>
#include <set>

#include "runtime/rlhf/example_batches.h"
#include "runtime/rlhf/token_examples.h"

namespace ds::rlhf {
namespace {

// Characters as tokens: 'a' -> 1, 'b' -> 2, ...
Encoding Letters(int64_t seq) {
  Encoding e;
  e.encode = [](const std::string& s) -> StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (char c : s) ids.push_back(c - 'a' + 1);
    return ids;
  };
  e.end = {30};
  e.pad = 0;
  e.seq = seq;
  return e;
}

PreferenceExample Ex(const std::string& p, const std::string& c, const std::string& r = "") {
  return {p, c, r, !r.empty()};
}

TEST_CASE("RLHF rows: SFT targets on the answer, reward pairs at their last token", "[rlhf]") {
  auto sft = SftExample(Ex("abc", "de"), Letters(8));
  REQUIRE(sft.ok());
  CHECK(sft->ids == std::vector<int32_t>{1, 2, 3, 4, 5, 30, 0, 0});
  const int32_t I = kIgnore;
  CHECK(sft->targets == std::vector<int32_t>{I, I, 4, 5, 30, I, I, I});
  auto cut = SftExample(Ex("abc", "defgh"), Letters(6));  // cut to 6: "abcdef"
  REQUIRE(cut.ok());
  CHECK(cut->targets == std::vector<int32_t>{I, I, 4, 5, 6, I});
  CHECK_FALSE(SftExample(Ex("abcdef", "g"), Letters(6)).ok());  // no answer token left
  auto pair = RewardPair(Ex("ab", "c", "dd"), Letters(6));
  REQUIRE(pair.ok());
  CHECK((*pair)[0].ids == std::vector<int32_t>{1, 2, 3, 30, 0, 0});
  CHECK((*pair)[0].targets == std::vector<int32_t>{0, 0, 0, 1, 0, 0});
  CHECK((*pair)[1].targets == std::vector<int32_t>{0, 0, 0, 0, 1, 0});
  CHECK_FALSE(RewardPair(Ex("ab", "c"), Letters(6)).ok());  // no rejected answer
}

// Item i's rows carry i in every id (row s of it: i * 10 + s).
std::vector<std::vector<TokenExample>> Items(int n, int rows) {
  std::vector<std::vector<TokenExample>> out(n);
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < rows; ++s) out[i].push_back({{i * 10 + s, i * 10 + s}, {s, s}});
  return out;
}

TEST_CASE("RLHF batches: pair layout, disjoint ranks, epochs and resume", "[rlhf]") {
  auto b = ExampleBatches::Create(Items(10, 2), {4, 2, 7, 0, 1});  // 2 pairs per micro-batch
  REQUIRE(b.ok());
  std::vector<int32_t> ids(8), targets(8);
  REQUIRE(b->Next(ids.data(), targets.data()).ok());
  CHECK(ids[4] == ids[0] + 1);  // row 2 is row 0's rejected answer
  CHECK(ids[6] == ids[2] + 1);
  CHECK(targets == std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1});
  // Two ranks: disjoint items within an epoch; the fifth pair of 10 items per epoch waits.
  std::set<int32_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto r = ExampleBatches::Create(Items(10, 1), {2, 1, 3, rank, 2});
    REQUIRE(r.ok());
    for (int step = 0; step < 2; ++step) {
      REQUIRE(r->Next(ids.data(), targets.data()).ok());
      for (int row = 0; row < 2; ++row) CHECK(seen.insert(ids[row * 2]).second);
    }
    CHECK(r->epoch() == 0);
    REQUIRE(r->Next(ids.data(), targets.data()).ok());  // 8 of 10 used: a new epoch
    CHECK(r->epoch() == 1);
  }
  CHECK(seen.size() == 8);
  // Seek: the same batches as the run that got there.
  auto one = ExampleBatches::Create(Items(10, 1), {2, 1, 5, 0, 1});
  auto two = ExampleBatches::Create(Items(10, 1), {2, 1, 5, 0, 1});
  for (int i = 0; i < 7; ++i) REQUIRE(one->Next(ids.data(), targets.data()).ok());
  REQUIRE(two->Seek(one->epoch(), one->position()).ok());
  std::vector<int32_t> a(4), b2(4);
  REQUIRE(one->Next(a.data(), targets.data()).ok());
  REQUIRE(two->Next(b2.data(), targets.data()).ok());
  CHECK(a == b2);
  CHECK_FALSE(ExampleBatches::Create(Items(3, 2), {4, 2, 1, 0, 2}).ok());  // 4 pairs needed
  CHECK_FALSE(ExampleBatches::Create(Items(8, 2), {3, 2, 1, 0, 1}).ok());  // odd rows
}

}  // namespace
}  // namespace ds::rlhf
