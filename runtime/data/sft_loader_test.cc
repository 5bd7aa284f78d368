// SftLoader: rows of prompt + answer + end token with the loss on the answer only, DeepSpeed-
// Chat's truncations (a prompt keeps its end, an answer its start, the row its first seq + 1
// tokens), left padding with its pad counts, the pairs' order split over data-parallel ranks and
// resumed at another dp_size.
#include "runtime/data/sft_loader.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/test_files.h"

namespace ds::data {
namespace {

constexpr int32_t kIgn = SftLoader::kIgnore;

// Writes `prompts` and `answers` as the two datasets ds-data preprocess makes.
void WritePairs(const std::string& name, const std::vector<std::vector<int64_t>>& prompts,
                const std::vector<std::vector<int64_t>>& answers) {
  IndexedDatasetWriter p(testing::TempPath(name + "_prompt_document"), IndexedDtype::kUint16);
  IndexedDatasetWriter a(testing::TempPath(name + "_chosen_document"), IndexedDtype::kUint16);
  for (const auto& d : prompts) REQUIRE(p.AddDocument(d).ok());
  for (const auto& d : answers) REQUIRE(a.AddDocument(d).ok());
  REQUIRE(p.Finalize().ok());
  REQUIRE(a.Finalize().ok());
}

SftLoader::Options Options(const std::string& name, int64_t batch, int64_t seq) {
  SftLoader::Options o;
  o.prompt = testing::TempPath(name + "_prompt_document");
  o.answer = testing::TempPath(name + "_chosen_document");
  o.batch = batch;
  o.seq = seq;
  o.eod = 1;
  return o;
}

std::unique_ptr<SftLoader> Open(const SftLoader::Options& o) {
  auto l = SftLoader::Open(o);
  INFO(l.status().ToString());
  REQUIRE(l.ok());
  return std::move(l).value();
}

TEST_CASE("an SFT row scores the answer and its end token only", "[data][sft]") {
  WritePairs("rows", {{11, 12, 13}, {31, 32, 33, 34, 35, 36, 37}}, {{21, 22}, {41, 42, 43}});
  auto l = Open(Options("rows", 1, 8));
  std::vector<int32_t> in(8), tg(8);
  REQUIRE(l->Row(0, in.data(), tg.data()).ok());
  CHECK(in == std::vector<int32_t>{11, 12, 13, 21, 22, 1, 1, 1});
  CHECK(tg == std::vector<int32_t>{kIgn, kIgn, 21, 22, 1, kIgn, kIgn, kIgn});
  // Longer than seq + 1: the row's first 9 tokens; the end token falls off.
  REQUIRE(l->Row(1, in.data(), tg.data()).ok());
  CHECK(in == std::vector<int32_t>{31, 32, 33, 34, 35, 36, 37, 41});
  CHECK(tg == std::vector<int32_t>{kIgn, kIgn, kIgn, kIgn, kIgn, kIgn, 41, 42});

  SftLoader::Options o = Options("rows", 1, 8);  // DeepSpeed-Chat's length limits
  o.max_prompt_seq_len = 2;
  o.max_answer_seq_len = 1;
  auto cut = Open(o);
  REQUIRE(cut->Row(1, in.data(), tg.data()).ok());
  CHECK(in == std::vector<int32_t>{36, 37, 41, 1, 1, 1, 1, 1});
  CHECK(tg == std::vector<int32_t>{kIgn, 41, 1, kIgn, kIgn, kIgn, kIgn, kIgn});
  std::vector<int32_t> pads(1, -1);
  o.left_pads = pads.data();  // left padding: the same tokens behind 5 pads
  auto left = Open(o);
  REQUIRE(left->Row(1, in.data(), tg.data(), pads.data()).ok());
  CHECK(in == std::vector<int32_t>{1, 1, 1, 1, 1, 36, 37, 41});
  CHECK(tg == std::vector<int32_t>{kIgn, kIgn, kIgn, kIgn, kIgn, kIgn, 41, 1});
  CHECK(pads[0] == 5);
  o.left_pads = nullptr;
  o.eod = -1;  // no end token: pads are 0
  auto bare = Open(o);
  REQUIRE(bare->Row(0, in.data(), tg.data()).ok());
  CHECK(in == std::vector<int32_t>{12, 13, 21, 0, 0, 0, 0, 0});
  CHECK(tg == std::vector<int32_t>{kIgn, 21, kIgn, kIgn, kIgn, kIgn, kIgn, kIgn});
}

// Ten pairs whose prompt is {100 + i}: a row's first input names its pair.
void WriteTen() {
  std::vector<std::vector<int64_t>> p, a;
  for (int64_t i = 0; i < 10; ++i) {
    p.push_back({100 + i});
    a.push_back({200 + i, 300 + i});
  }
  WritePairs("ten", p, a);
}

std::vector<int32_t> FirstInputs(SftLoader* l, int64_t batch) {
  std::vector<int32_t> in(batch * 4), tg(batch * 4), first;
  REQUIRE(l->Next(in.data(), tg.data()).ok());
  for (int64_t i = 0; i < batch; ++i) first.push_back(in[i * 4]);
  return first;
}

TEST_CASE("SFT pairs: each epoch a permutation, split over ranks, resumed at any dp_size",
          "[data][sft]") {
  WriteTen();
  auto one = Open(Options("ten", 4, 4));
  std::vector<int32_t> seen;
  for (int step = 0; step < 5; ++step)  // 20 rows: two epochs
    for (int32_t x : FirstInputs(one.get(), 4)) seen.push_back(x);
  CHECK(std::set<int32_t>(seen.begin(), seen.begin() + 10).size() == 10);
  CHECK(std::set<int32_t>(seen.begin() + 10, seen.end()).size() == 10);
  CHECK(std::vector<int32_t>(seen.begin(), seen.begin() + 10) !=
        std::vector<int32_t>(seen.begin() + 10, seen.end()));  // another order
  CHECK(one->state() == DataLoaderState{2, 0});

  SftLoader::Options o0 = Options("ten", 2, 4), o1 = o0;
  o1.dp_rank = 1;
  o0.dp_size = o1.dp_size = 2;
  auto r0 = Open(o0), r1 = Open(o1);
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> both = FirstInputs(r0.get(), 2), b = FirstInputs(r1.get(), 2);
    both.insert(both.end(), b.begin(), b.end());
    CHECK(both == std::vector<int32_t>(seen.begin() + 4 * step, seen.begin() + 4 * step + 4));
  }
  auto resumed = Open(Options("ten", 4, 4));
  REQUIRE(resumed->SetState(r0->state()).ok());  // {1, 2}
  CHECK(FirstInputs(resumed.get(), 4) ==
        std::vector<int32_t>(seen.begin() + 12, seen.begin() + 16));
  CHECK(resumed->SetState({0, 10}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("SFT datasets that do not pair up are refused naming them", "[data][sft]") {
  WritePairs("odd", {{1}, {2}, {3}}, {{4}, {5}});
  auto l = SftLoader::Open(Options("odd", 1, 4));
  REQUIRE_FALSE(l.ok());
  CHECK(l.status().message().find("3 prompts") != std::string::npos);
  CHECK(l.status().message().find("odd_chosen_document 2 answers") != std::string::npos);
  SftLoader::Options o = Options("odd", 1, 4);
  o.answer = testing::TempPath("missing");
  CHECK(SftLoader::Open(o).status().message().find("missing") != std::string::npos);
}

}  // namespace
}  // namespace ds::data
