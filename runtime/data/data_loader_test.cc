#include "runtime/data/data_loader.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/data/test_files.h"

namespace ds::data {
namespace {

using testing::TempPath;

// A token file whose token i is i, so every batch shows where it was read from.
std::string IotaFile(const std::string& name, int64_t n) {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  const std::string path = TempPath(name);
  REQUIRE(WriteTokenFile(path, tokens, TokenDType::kUint32, 0).ok());
  return path;
}

DataLoaderOptions Options(const std::string& path, int64_t b, int64_t t, bool shuffle) {
  DataLoaderOptions o;
  o.path = path;
  o.batch = b;
  o.seq = t;
  o.shuffle = shuffle;
  return o;
}

std::unique_ptr<DataLoader> MakeLoader(const DataLoaderOptions& o) {
  StatusOr<std::unique_ptr<DataLoader>> loader = DataLoader::Open(o);
  REQUIRE(loader.ok());
  return std::move(loader).value();
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch& o) const { return inputs == o.inputs && targets == o.targets; }
};

Batch NextBatch(DataLoader* loader) {
  const size_t n = static_cast<size_t>(loader->options().batch * loader->options().seq);
  Batch b{std::vector<int32_t>(n), std::vector<int32_t>(n)};
  REQUIRE(loader->Next(b.inputs.data(), b.targets.data()).ok());
  return b;
}

std::vector<int32_t> Range(int32_t begin, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = begin + i;
  return v;
}

TEST_CASE("DataLoader: shuffle=false follows llm.c's order and wraps", "[data]") {
  const std::string path = IotaFile("seq.tok", 20);
  std::unique_ptr<DataLoader> loader = MakeLoader(Options(path, 2, 4, false));
  CHECK(loader->steps_per_epoch() == 2);
  Batch b = NextBatch(loader.get());
  CHECK(b.inputs == Range(0, 8));
  CHECK(b.targets == Range(1, 8));
  b = NextBatch(loader.get());
  CHECK(b.inputs == Range(8, 8));
  CHECK(b.targets == Range(9, 8));
  CHECK(loader->state() == DataLoaderState{0, 16});
  // 16 + 8 + 1 > 20: wraps to the start.
  b = NextBatch(loader.get());
  CHECK(b.inputs == Range(0, 8));
  CHECK(loader->state() == DataLoaderState{1, 8});
}

TEST_CASE("DataLoader: shuffle=false with data parallelism interleaves like llm.c", "[data]") {
  const std::string path = IotaFile("seq_dp.tok", 50);
  DataLoaderOptions o = Options(path, 2, 4, false);
  o.dp_size = 2;
  o.dp_rank = 0;
  std::unique_ptr<DataLoader> r0 = MakeLoader(o);
  o.dp_rank = 1;
  std::unique_ptr<DataLoader> r1 = MakeLoader(o);
  CHECK(NextBatch(r0.get()).inputs == Range(0, 8));
  CHECK(NextBatch(r1.get()).inputs == Range(8, 8));
  CHECK(NextBatch(r0.get()).inputs == Range(16, 8));
  CHECK(NextBatch(r1.get()).inputs == Range(24, 8));
  CHECK(NextBatch(r0.get()).inputs == Range(32, 8));  // 32 + 16 + 1 = 49 <= 50
  CHECK(NextBatch(r1.get()).inputs == Range(40, 8));
  CHECK(NextBatch(r0.get()).inputs == Range(0, 8));  // both wrap on the same step
  CHECK(NextBatch(r1.get()).inputs == Range(8, 8));
  CHECK(r0->state() == r1->state());
}

// The window starts (multiples of T) of one batch; checks each row is a T+1 window.
std::vector<int32_t> WindowStarts(const Batch& b, int64_t t) {
  std::vector<int32_t> starts;
  for (size_t row = 0; row * t < b.inputs.size(); ++row) {
    const int32_t start = b.inputs[row * t];
    CHECK(start % t == 0);
    for (int64_t j = 0; j < t; ++j) {
      CHECK(b.inputs[row * t + j] == start + j);
      CHECK(b.targets[row * t + j] == start + j + 1);
    }
    starts.push_back(start);
  }
  return starts;
}

TEST_CASE("DataLoader: shuffle=true visits every window once per epoch", "[data]") {
  const std::string path = IotaFile("shuf.tok", 101);  // 25 windows of T=4
  std::unique_ptr<DataLoader> loader = MakeLoader(Options(path, 5, 4, true));
  REQUIRE(loader->num_windows() == 25);
  REQUIRE(loader->steps_per_epoch() == 5);
  std::vector<int32_t> epoch0, epoch1;
  for (int step = 0; step < 5; ++step) {
    for (int32_t s : WindowStarts(NextBatch(loader.get()), 4)) epoch0.push_back(s);
  }
  CHECK(loader->state() == DataLoaderState{1, 0});
  for (int step = 0; step < 5; ++step) {
    for (int32_t s : WindowStarts(NextBatch(loader.get()), 4)) epoch1.push_back(s);
  }
  std::vector<int32_t> sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  std::vector<int32_t> all;
  for (int32_t w = 0; w < 25; ++w) all.push_back(w * 4);
  CHECK(sorted0 == all);
  CHECK(sorted1 == all);
  CHECK(epoch0 != epoch1);  // a new order each epoch
  CHECK(epoch0 != all);     // and actually shuffled
}

TEST_CASE("DataLoader: shuffled order is determined by the seed", "[data]") {
  const std::string path = IotaFile("seed.tok", 401);
  DataLoaderOptions o = Options(path, 4, 4, true);
  o.seed = 7;
  std::unique_ptr<DataLoader> a = MakeLoader(o);
  std::unique_ptr<DataLoader> b = MakeLoader(o);
  o.seed = 8;
  std::unique_ptr<DataLoader> c = MakeLoader(o);
  bool any_difference = false;
  for (int step = 0; step < 30; ++step) {  // crosses an epoch (25 steps)
    const Batch ba = NextBatch(a.get());
    CHECK(ba == NextBatch(b.get()));
    any_difference = any_difference || !(ba == NextBatch(c.get()));
  }
  CHECK(any_difference);
}

TEST_CASE("DataLoader: shuffled ranks take disjoint windows", "[data]") {
  const std::string path = IotaFile("shuf_dp.tok", 97);  // 24 windows of T=4
  DataLoaderOptions o = Options(path, 3, 4, true);
  o.dp_size = 2;
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < 2; ++r) {
    o.dp_rank = r;
    ranks.push_back(MakeLoader(o));
  }
  REQUIRE(ranks[0]->steps_per_epoch() == 4);
  std::set<int32_t> seen[2];
  for (int step = 0; step < 4; ++step) {
    for (int r = 0; r < 2; ++r) {
      for (int32_t s : WindowStarts(NextBatch(ranks[r].get()), 4)) seen[r].insert(s);
    }
  }
  CHECK(seen[0].size() == 12);
  CHECK(seen[1].size() == 12);
  for (int32_t s : seen[0]) CHECK(seen[1].count(s) == 0);
  CHECK(ranks[0]->state() == ranks[1]->state());
}

TEST_CASE("DataLoader: a saved state resumes with identical batches", "[data]") {
  const std::string path = IotaFile("state.tok", 203);
  for (bool shuffle : {false, true}) {
    INFO("shuffle " << shuffle);
    DataLoaderOptions o = Options(path, 3, 5, shuffle);
    o.seed = 99;
    std::unique_ptr<DataLoader> first = MakeLoader(o);
    for (int i = 0; i < 17; ++i) NextBatch(first.get());  // past an epoch boundary
    const std::string saved = first->state().ToJson();
    std::vector<Batch> expected;
    for (int i = 0; i < 20; ++i) expected.push_back(NextBatch(first.get()));

    StatusOr<DataLoaderState> state = DataLoaderState::FromJson(saved);
    REQUIRE(state.ok());
    CHECK(state->ToJson() == saved);
    std::unique_ptr<DataLoader> resumed = MakeLoader(o);
    REQUIRE(resumed->SetState(*state).ok());
    for (int i = 0; i < 20; ++i) CHECK(NextBatch(resumed.get()) == expected[i]);
    resumed->Reset();
    CHECK(resumed->state() == DataLoaderState{});
  }
}

TEST_CASE("DataLoader: state JSON and range errors", "[data]") {
  CHECK(DataLoaderState{3, 4096}.ToJson() == "{\"epoch\": 3, \"position\": 4096}");
  CHECK(DataLoaderState::FromJson("{\"position\": 5, \"epoch\": 2}")->position == 5);
  for (const char* bad : {"", "[1, 2]", "{\"epoch\": 1}", "{\"epoch\": -1, \"position\": 0}",
                          "{\"epoch\": \"x\", \"position\": 0}", "{epoch: [1"}) {
    INFO(bad);
    CHECK(DataLoaderState::FromJson(bad).status().code() == StatusCode::kInvalidArgument);
  }
  const std::string path = IotaFile("range.tok", 41);
  std::unique_ptr<DataLoader> loader = MakeLoader(Options(path, 2, 4, true));  // 10 windows
  CHECK(loader->SetState({0, 9}).ok());
  CHECK(loader->SetState({0, 10}).code() == StatusCode::kInvalidArgument);
  CHECK(loader->SetState({-1, 0}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("DataLoader: files too small and bad options are errors", "[data]") {
  const std::string path = IotaFile("small.tok", 9);
  SECTION("fewer than seq_len + 1 tokens") {
    StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(Options(path, 1, 8, true));
    CHECK(l.ok());
    l = DataLoader::Open(Options(path, 1, 9, true));
    REQUIRE_FALSE(l.ok());
    CHECK(l.status().message() == path + ": 9 tokens, fewer than seq_len + 1 = 10");
  }
  SECTION("sequential order needs dp_size x B x T + 1 tokens") {
    StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(Options(path, 2, 4, false));
    REQUIRE(l.ok());
    DataLoaderOptions o = Options(path, 2, 4, false);
    o.dp_size = 2;
    l = DataLoader::Open(o);
    REQUIRE_FALSE(l.ok());
    CHECK(l.status().message().find("fewer than the 17 one sequential step reads") !=
          std::string::npos);
  }
  SECTION("bad options") {
    DataLoaderOptions o = Options(path, 1, 4, true);
    o.dp_rank = 2;
    o.dp_size = 2;
    CHECK(DataLoader::Open(o).status().code() == StatusCode::kInvalidArgument);
    CHECK(DataLoader::Open(Options(path, 0, 4, true)).status().code() ==
          StatusCode::kInvalidArgument);
    CHECK(DataLoader::Open(Options(path, 1, 0, true)).status().code() ==
          StatusCode::kInvalidArgument);
  }
  SECTION("missing and corrupted files") {
    CHECK(DataLoader::Open(Options(TempPath("missing.tok"), 1, 4, true)).status().code() ==
          StatusCode::kNotFound);
    std::vector<uint8_t> bytes = testing::ReadBytes(path);
    bytes.resize(bytes.size() - 2);  // tokens cut short
    const std::string cut = TempPath("cut.tok");
    REQUIRE(testing::WriteBytes(cut, bytes));
    StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(Options(cut, 1, 4, true));
    CHECK(l.status().code() == StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace ds::data
