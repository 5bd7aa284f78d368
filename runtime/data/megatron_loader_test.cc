// MegatronLoader against megatron-core: the job blend of testdata/megatron/blend_job_golden.txt
// (tools/megatron_gpt_golden.py: 0.3 gpt_blend_a + 0.7 gpt_blend_b, split "969,30,1", seq_len
// 16, 200 train and 20 validation samples, seeds 1234 and 42). One rank, and two ranks
// together, read every train sample in megatron-core's order; a state saved after k steps at
// DP 2 resumes at DP 1 (and back) on sample k * 4; the validation split is read too.
#include "runtime/data/megatron_loader.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ds::data {
namespace {

const char* kDir = "runtime/data/testdata/megatron/";

// golden[{seed, split}] = the samples, seq_len + 1 tokens each.
std::map<std::pair<uint32_t, std::string>, std::vector<std::vector<int32_t>>> ReadGolden() {
  std::ifstream in(std::string(kDir) + "blend_job_golden.txt");
  REQUIRE(in);
  std::map<std::pair<uint32_t, std::string>, std::vector<std::vector<int32_t>>> golden;
  std::vector<std::vector<int32_t>>* current = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string name;
    s >> name;
    if (name == "job") {
      uint32_t seed = 0;
      std::string split;
      s >> seed >> split;
      current = &golden[{seed, split}];
    } else if (name == "item") {
      int n = 0;
      s >> n;
      current->emplace_back(n);
      for (int32_t& x : current->back()) s >> x;
    }
  }
  return golden;
}

MegatronLoader::Options JobOptions(uint32_t seed, int64_t batch, int rank, int size) {
  MegatronLoader::Options o;
  o.samples.data_path = {"0.3", std::string(kDir) + "gpt_blend_a", "0.7",
                         std::string(kDir) + "gpt_blend_b"};
  o.samples.split = "969,30,1";
  o.samples.num_samples = 200;
  o.samples.seq_len = o.seq = 16;
  o.samples.seed = seed;
  o.batch = batch;
  o.dp_rank = rank;
  o.dp_size = size;
  return o;
}

std::unique_ptr<MegatronLoader> Open(const MegatronLoader::Options& o) {
  auto loader = MegatronLoader::Open(o);
  REQUIRE(loader.ok());
  return std::move(loader).value();
}

// The rows one Next gives, each rebuilt as the seq_len + 1 tokens of its sample.
std::vector<std::vector<int32_t>> NextRows(MegatronLoader* loader, int64_t batch) {
  std::vector<int32_t> in(batch * 16), out(batch * 16);
  REQUIRE(loader->Next(in.data(), out.data()).ok());
  std::vector<std::vector<int32_t>> rows;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> row(in.begin() + i * 16, in.begin() + (i + 1) * 16);
    for (int j = 0; j < 15; ++j) REQUIRE(out[i * 16 + j] == in[i * 16 + j + 1]);
    row.push_back(out[i * 16 + 15]);
    rows.push_back(row);
  }
  return rows;
}

TEST_CASE("one rank reads megatron-core's 200 blended samples in order, two seeds",
          "[data][megatron]") {
  auto golden = ReadGolden();
  for (uint32_t seed : {1234u, 42u}) {
    const auto& want = golden[{seed, "train"}];
    REQUIRE(want.size() == 200);
    auto loader = Open(JobOptions(seed, 4, 0, 1));
    CHECK(loader->size() == 200);
    // The build's description: the training part of "969,30,1" holds 1163 of gpt_blend_a's
    // 1200 documents (round(0.969 x 1200)), one epoch of them.
    const std::vector<std::string> lines = loader->samples().Describe();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].find("gpt_blend_a (weight 0.3000): 1,163 documents, ") != std::string::npos);
    CHECK(lines[0].find(", 1 epoch, ") != std::string::npos);
    CHECK(lines[1].find("gpt_blend_b (weight 0.7000): 872 documents, ") != std::string::npos);
    std::vector<std::vector<int32_t>> got;
    for (int step = 0; step < 50; ++step)
      for (auto& row : NextRows(loader.get(), 4)) got.push_back(row);
    CHECK(got == want);
    std::vector<int32_t> in(64), out(64);
    Status end = loader->Next(in.data(), out.data());
    CHECK(end.code() == StatusCode::kOutOfRange);
    CHECK(end.message().find("used up at sample 200") != std::string::npos);
  }
}

TEST_CASE("two ranks split each step's samples as megatron-core's sampler does",
          "[data][megatron]") {
  auto golden = ReadGolden();
  const auto& want = golden[{42u, "train"}];
  auto r0 = Open(JobOptions(42, 2, 0, 2));
  auto r1 = Open(JobOptions(42, 2, 1, 2));
  for (int step = 0; step < 50; ++step) {
    auto a = NextRows(r0.get(), 2);
    auto b = NextRows(r1.get(), 2);
    REQUIRE(a[0] == want[step * 4]);
    REQUIRE(a[1] == want[step * 4 + 1]);
    REQUIRE(b[0] == want[step * 4 + 2]);
    REQUIRE(b[1] == want[step * 4 + 3]);
    REQUIRE(r0->state().position == (step + 1) * 4);
  }
}

TEST_CASE("a state saved at DP 2 resumes at DP 1 and back on the same samples",
          "[data][megatron]") {
  auto golden = ReadGolden();
  const auto& want = golden[{1234u, "train"}];
  auto r0 = Open(JobOptions(1234, 2, 0, 2));
  for (int step = 0; step < 7; ++step) NextRows(r0.get(), 2);
  auto saved = DataLoaderState::FromJson(r0->state().ToJson());
  REQUIRE(saved.ok());
  CHECK(saved->position == 28);
  auto one = Open(JobOptions(1234, 4, 0, 1));
  REQUIRE(one->SetState(*saved).ok());
  CHECK(NextRows(one.get(), 4) ==
        std::vector<std::vector<int32_t>>(want.begin() + 28, want.begin() + 32));
  auto back = Open(JobOptions(1234, 2, 1, 2));
  REQUIRE(back->SetState(one->state()).ok());
  CHECK(NextRows(back.get(), 2) ==
        std::vector<std::vector<int32_t>>(want.begin() + 34, want.begin() + 36));
  Status outside = one->SetState({0, 201});
  CHECK(outside.code() == StatusCode::kInvalidArgument);
  CHECK(outside.message().find("outside these datasets") != std::string::npos);
  CHECK(one->SetState({1, 0}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the validation split equals megatron-core's", "[data][megatron]") {
  auto golden = ReadGolden();
  for (uint32_t seed : {1234u, 42u}) {
    MegatronLoader::Options o = JobOptions(seed, 4, 0, 1);
    o.samples.split_index = 1;
    o.samples.num_samples = 20;
    auto loader = Open(o);
    std::vector<std::vector<int32_t>> got;
    for (int step = 0; step < 5; ++step)
      for (auto& row : NextRows(loader.get(), 4)) got.push_back(row);
    CHECK(got == golden[{seed, "validation"}]);
  }
}

TEST_CASE("bad loader options are refused naming the data", "[data][megatron]") {
  MegatronLoader::Options o = JobOptions(1234, 4, 0, 1);
  o.seq = 8;
  auto bad = MegatronLoader::Open(o);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("data.path: seq_len 8") != std::string::npos);
  o = JobOptions(1234, 4, 2, 2);
  CHECK(MegatronLoader::Open(o).status().message().find("dp_rank 2") != std::string::npos);
  o = JobOptions(1234, 200, 0, 2);
  bad = MegatronLoader::Open(o);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("fewer than one step's 400") != std::string::npos);
  o = JobOptions(1234, 4, 0, 1);
  o.samples.data_path[1] = std::string(kDir) + "no_such_prefix";
  bad = MegatronLoader::Open(o);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("no_such_prefix") != std::string::npos);
}

}  // namespace
}  // namespace ds::data
