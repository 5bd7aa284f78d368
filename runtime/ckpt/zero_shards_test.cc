#include "runtime/ckpt/zero_shards.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

// Parameter "w" [4, 3] (12 elements) and "b" [5]; states "master" and "exp_avg". Element i
// of w holds i (master) or 100 + i (exp_avg); b holds 50 + i / 150 + i. Rank 0 owns w[0, 7),
// rank 1 owns w[7, 12) and all of b. `cut` moves rank 1's w slice start (gap/overlap tests).
struct Fixture {
  std::vector<float> w_master, w_avg, b_master, b_avg;
  Fixture() {
    for (int i = 0; i < 12; ++i) w_master.push_back(i), w_avg.push_back(100 + i);
    for (int i = 0; i < 5; ++i) b_master.push_back(50 + i), b_avg.push_back(150 + i);
  }
  Status Save(const std::string& root, int64_t cut = 7, int world_meta = 2) {
    DS_RETURN_IF_ERROR(BeginCheckpoint(root, 3));
    const std::string tmp = TempStepDir(root, 3);
    WrittenFiles written;
    std::vector<std::vector<SliceDesc>> slices = {
        {{"master", "w", {4, 3}, 0, 7}, {"exp_avg", "w", {4, 3}, 0, 7}},
        {{"master", "w", {4, 3}, cut, 12 - cut},
         {"exp_avg", "w", {4, 3}, cut, 12 - cut},
         {"master", "b", {5}, 0, 5},
         {"exp_avg", "b", {5}, 0, 5}}};
    std::vector<std::vector<const float*>> data = {
        {w_master.data(), w_avg.data()},
        {w_master.data() + cut, w_avg.data() + cut, b_master.data(), b_avg.data()}};
    for (int r = 0; r < 2; ++r) {
      DS_ASSIGN_OR_RETURN(SafetensorsWriteResult res,
                          WriteZeroShardFile(tmp, {r, world_meta, 3, 3}, slices[r], data[r]));
      written.files.push_back({ZeroShardFileName(r), res.file_bytes, res.file_crc32c});
      for (size_t i = 0; i < slices[r].size(); ++i)
        written.tensors.push_back(SliceRecord(r, slices[r][i], res.tensor_crc32c[i]));
    }
    CheckpointContents c;
    c.step = 3;
    c.state["engine"] = "{\"step\": 3}";
    c.info["world_size"] = "2";
    c.info["layout"] = kZeroShardedLayout;
    return CommitCheckpoint(root, c, written);
  }
};

bool Has(const std::string& s, const std::string& part) {
  INFO(s);
  return s.find(part) != std::string::npos;
}

TEST_CASE("ZeroShards: names", "[ckpt][zero]") {
  CHECK(ZeroShardFileName(3) == "zero_shard_rank_00003.safetensors");
  int r = -1;
  CHECK(ParseZeroShardFileName("zero_shard_rank_00012.safetensors", &r));
  CHECK(r == 12);
  CHECK_FALSE(ParseZeroShardFileName("zero_shard_rank_12.safetensors", &r));
  CHECK_FALSE(ParseZeroShardFileName("model.safetensors", &r));
  CHECK(SliceName("exp_avg", "h.0.attn.qkv.weight", 1536) == "exp_avg/h.0.attn.qkv.weight#1536");
}

TEST_CASE("ZeroShards: rank files read back by element range across files", "[ckpt][zero]") {
  const std::string root = testing::MakeTempDir("zero_shards");
  Fixture f;
  REQUIRE(f.Save(root).ok());
  auto names = ListDir(JoinPath(root, "step_00000003"));
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"manifest.json", "state.json",
                                           "zero_shard_rank_00000.safetensors",
                                           "zero_shard_rank_00001.safetensors"});
  auto r = CheckpointReader::Open(root);
  REQUIRE(r.ok());
  CHECK(r->sharded());
  CHECK(r->step() == 3);
  CHECK(r->state().at("engine") == "{\"step\": 3}");
  REQUIRE(r->params().size() == 2);
  CHECK(r->params()[0] == std::make_pair(std::string("w"), Shape{4, 3}));
  std::vector<float> got(6);
  REQUIRE(r->Read("exp_avg", "w", 4, 10, got.data()).ok());  // spans both rank files
  CHECK(got == std::vector<float>{104, 105, 106, 107, 108, 109});
  REQUIRE(r->Read("master", "b", 1, 3, got.data()).ok());
  CHECK(got[0] == 51);
  CHECK(got[1] == 52);
  Status missing = r->Verify("exp_avg_sq", "w", 0, 1);
  CHECK(Has(missing.message(), "exp_avg_sq/w is missing"));
  for (const FileRecord& file : r->manifest().files) CHECK(r->VerifyFile(file).ok());
}

// A row-parallel weight [4, 6] split over 2 tensor-parallel ranks by columns: rank 0 holds
// columns 0-2 of every row, rank 1 columns 3-5, each as one strided [4, 3] record (row_stride
// 6), not four 3-element ones; any element range reads back across both.
TEST_CASE("ZeroShards: strided slices of a row-parallel weight", "[ckpt][zero]") {
  const std::string root = testing::MakeTempDir("zero_strided");
  std::vector<float> whole(24);
  std::iota(whole.begin(), whole.end(), 0.0f);
  std::vector<std::vector<float>> cols(2);
  for (int r = 0; r < 2; ++r)
    for (int row = 0; row < 4; ++row)
      for (int c = 0; c < 3; ++c) cols[r].push_back(whole[row * 6 + r * 3 + c]);
  REQUIRE(BeginCheckpoint(root, 5).ok());
  WrittenFiles written;
  for (int r = 0; r < 2; ++r) {
    const SliceDesc d{"master", "w", {4, 6}, 3 * r, 3, 4, 6};
    auto res = WriteZeroShardFile(TempStepDir(root, 5), {r, 2, 1, 5}, {d}, {cols[r].data()});
    REQUIRE(res.ok());
    written.files.push_back({ZeroShardFileName(r), res->file_bytes, res->file_crc32c});
    written.tensors.push_back(SliceRecord(r, d, res->tensor_crc32c[0]));
    CHECK(written.tensors.back().spec.shape == Shape{4, 3});
    CHECK(written.tensors.back().shard->row_stride == 6);
  }
  CheckpointContents c;
  c.step = 5;
  c.state["engine"] = "{}";
  c.info["world_size"] = "2";
  c.info["layout"] = kZeroShardedLayout;
  REQUIRE(CommitCheckpoint(root, c, written).ok());
  auto r = CheckpointReader::Open(root);
  INFO((r.ok() ? "" : r.status().ToString()));
  REQUIRE(r.ok());
  CHECK(r->manifest().tensors.size() == 2);
  CHECK(r->manifest().tensors[0].shard->row_stride == 6);  // through the manifest's JSON
  std::vector<float> got(24);
  REQUIRE(r->Read("master", "w", 0, 24, got.data()).ok());
  CHECK(got == whole);
  std::vector<float> part(9);
  REQUIRE(r->Read("master", "w", 4, 13, part.data()).ok());
  CHECK(part == std::vector<float>(whole.begin() + 4, whole.begin() + 13));
  // A record whose rows would overlap, or run past the parameter, is refused.
  CHECK_FALSE(ValidateShard("w", {4, 3}, ShardRecord{{4, 6}, {}, 0, 2}).ok());
  CHECK_FALSE(ValidateShard("w", {4, 3}, ShardRecord{{4, 6}, {}, 4, 6}).ok());
  CHECK(ValidateShard("w", {4, 3}, ShardRecord{{4, 6}, {}, 3, 6}).ok());
  CHECK_FALSE(ValidateShard("w", {12}, ShardRecord{{4, 6}, {}, 0, 6}).ok());  // 1-D strided
}

TEST_CASE("ZeroShards: gaps, overlaps, corrupt bytes and bad metadata name the file",
          "[ckpt][zero]") {
  Fixture f;
  SECTION("gap") {
    const std::string root = testing::MakeTempDir("zero_gap");
    REQUIRE(f.Save(root, /*cut=*/8).ok());
    auto r = CheckpointReader::Open(root);
    REQUIRE_FALSE(r.ok());
    CHECK(Has(r.status().message(), "elements [7, 8) are in no file"));
  }
  SECTION("overlap") {
    const std::string root = testing::MakeTempDir("zero_overlap");
    REQUIRE(f.Save(root, /*cut=*/6).ok());
    auto r = CheckpointReader::Open(root);
    REQUIRE_FALSE(r.ok());
    CHECK(Has(r.status().message(),
              "zero_shard_rank_00001.safetensors: exp_avg/w elements [6, 12) overlap"));
  }
  SECTION("a flipped data byte fails the slice and the file naming the rank file") {
    const std::string root = testing::MakeTempDir("zero_flip");
    REQUIRE(f.Save(root).ok());
    const std::string file = root + "/step_00000003/zero_shard_rank_00001.safetensors";
    testing::XorByteAt(file, testing::ReadRawFile(file).size() - 1);  // last of exp_avg/b
    auto r = CheckpointReader::Open(root);
    REQUIRE(r.ok());
    std::vector<float> got(12);
    CHECK(r->Read("master", "w", 0, 7, got.data()).ok());  // rank 0's file is intact
    Status s = r->Verify("exp_avg", "b", 0, 5);
    CHECK(Has(s.message(), "zero_shard_rank_00001.safetensors: tensor "));
    CHECK(Has(s.message(), "checksum mismatch"));
    Status whole = r->VerifyFile(r->manifest().files.back());
    CHECK(Has(whole.message(), "zero_shard_rank_00001.safetensors: file checksum mismatch"));
  }
  SECTION("world size in a file's metadata differs from the manifest") {
    const std::string root = testing::MakeTempDir("zero_meta");
    REQUIRE(f.Save(root, 7, /*world_meta=*/4).ok());
    auto r = CheckpointReader::Open(root);
    REQUIRE(r.ok());
    std::vector<float> got(12);
    Status s = r->Read("master", "w", 0, 12, got.data());
    CHECK(Has(s.message(), "zero_shard_rank_00000.safetensors: metadata inconsistent"));
    CHECK(Has(s.message(), "world_size 4"));
  }
  SECTION("a rank file missing from the directory") {
    const std::string root = testing::MakeTempDir("zero_missing");
    REQUIRE(f.Save(root).ok());
    REQUIRE(RemoveTree(root + "/step_00000003/zero_shard_rank_00001.safetensors").ok());
    auto r = CheckpointReader::Open(root);
    REQUIRE(r.ok());
    std::vector<float> got(12);
    Status s = r->Read("master", "w", 0, 12, got.data());
    CHECK(Has(s.message(), "zero_shard_rank_00001.safetensors: missing"));
  }
}

}  // namespace
}  // namespace ds::ckpt
