#include "runtime/ckpt/checkpoint.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

using testing::MakeTempDir;
using testing::RandomTensor;
using testing::SameBytes;

// Owns the tensors behind a CheckpointContents.
struct Fixture {
  std::vector<OwnedTensor> owned;
  CheckpointContents contents;

  explicit Fixture(int64_t step, uint32_t seed = 1) {
    contents.step = step;
    Add(&contents.model, "wte", {8, 4}, DType::kF32, seed);
    Add(&contents.model, "h.0.ln_1.weight", {4}, DType::kBF16, seed + 1);
    Add(&contents.model, "h.0.attn.qkv.weight", {12, 4}, DType::kBF16, seed + 2);
    Add(&contents.model, "tokens_seen", {2}, DType::kI32, seed + 3);
    Add(&contents.optimizer, "exp_avg/wte", {8, 4}, DType::kF32, seed + 4);
    Add(&contents.optimizer, "master/h.0.ln_1.weight", {4}, DType::kF32, seed + 5);
    contents.state["scheduler"] = R"({"lr": 0.001, "last_step": )" + std::to_string(step) + "}";
    contents.state["rng"] = R"({"seed": 18446744073709551615,  "pos": [1, 2]})";
    contents.info["zero_stage"] = "0";
    contents.info["world_size"] = "1";
  }
  void Add(std::vector<NamedTensor>* list, const std::string& name, Shape shape, DType dtype,
           uint32_t seed) {
    owned.push_back(RandomTensor(std::move(shape), dtype, seed));
    list->push_back({name, owned.back().view()});
  }
};

void CheckMatches(const LoadedCheckpoint& ck, const CheckpointContents& c) {
  CHECK(ck.step() == c.step);
  REQUIRE(ck.model().size() == c.model.size());
  for (size_t i = 0; i < c.model.size(); ++i) {
    CHECK(ck.model()[i].name == c.model[i].name);
    CHECK(SameBytes(ck.model()[i].tensor, c.model[i].tensor));
  }
  REQUIRE(ck.optimizer().size() == c.optimizer.size());
  for (const NamedTensor& t : c.optimizer) {
    auto got = ck.OptimizerTensor(t.name);
    REQUIRE(got.ok());
    CHECK(SameBytes(*got, t.tensor));
  }
  CHECK(ck.state() == c.state);
  CHECK(ck.info() == c.info);
}

std::string ReadLatest(const std::string& root) {
  auto s = ReadFileToString(JoinPath(root, kLatestFile));
  REQUIRE(s.ok());
  return *s;
}

TEST_CASE("Checkpoint: round trip of f32/bf16/i32 tensors, state and info", "[ckpt]") {
  std::string root = MakeTempDir("ck_roundtrip");
  std::vector<OwnedTensor> keep;
  Fixture f(10);
  REQUIRE(SaveCheckpoint(root, f.contents).ok());
  CHECK(ReadLatest(root) == "step_00000010\n");
  for (const char* file : {kManifestFile, kModelFile, kOptimizerFile, kStateFile}) {
    CHECK(PathExists(root + "/step_00000010/" + file));
  }
  auto by_root = LoadCheckpoint(root);
  REQUIRE(by_root.ok());
  CheckMatches(*by_root, f.contents);
  CHECK(by_root->dir() == root + "/step_00000010");
  auto by_dir = LoadCheckpoint(root + "/step_00000010");
  REQUIRE(by_dir.ok());
  CheckMatches(*by_dir, f.contents);
  CHECK(by_dir->ModelTensor("nope").status().code() == StatusCode::kNotFound);
  // Views survive moving the checkpoint object.
  LoadedCheckpoint moved = std::move(by_dir).value();
  CheckMatches(moved, f.contents);
  auto fast = LoadCheckpoint(root, LoadOptions{/*verify_checksums=*/false});
  REQUIRE(fast.ok());
  CheckMatches(*fast, f.contents);
}

TEST_CASE("Checkpoint: manifest records shards, dtypes and checksums", "[ckpt]") {
  std::string root = MakeTempDir("ck_manifest");
  Fixture f(3);
  f.contents.shards["exp_avg/wte"] = ShardRecord{{16, 4}, {8, 0}};
  REQUIRE(SaveCheckpoint(root, f.contents).ok());
  auto ck = LoadCheckpoint(root);
  REQUIRE(ck.ok());
  const Manifest& m = ck->manifest();
  CHECK(m.files.size() == 3);
  REQUIRE(m.tensors.size() == 6);
  CHECK(m.tensors[1].spec.dtype == DType::kBF16);
  CHECK(m.tensors[4].file == kOptimizerFile);
  REQUIRE(m.tensors[4].shard.has_value());
  CHECK(m.tensors[4].shard->global_shape == Shape{16, 4});
  CHECK_FALSE(m.tensors[0].shard.has_value());

  Fixture bad(4);
  bad.contents.shards["wte"] = ShardRecord{{8, 4}, {1, 0}};  // 1 + 8 > 8
  CHECK(SaveCheckpoint(root, bad.contents).code() == StatusCode::kInvalidArgument);
  Fixture bad_state(4);
  bad_state.contents.state["engine"] = "{not json";
  CHECK(SaveCheckpoint(root, bad_state.contents).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("Checkpoint: latest pointer follows saves; keep_last prunes", "[ckpt]") {
  std::string root = MakeTempDir("ck_keep");
  std::vector<std::unique_ptr<Fixture>> fixtures;
  for (int64_t step : {10, 20, 30, 40}) {
    fixtures.push_back(std::make_unique<Fixture>(step, static_cast<uint32_t>(step)));
    REQUIRE(SaveCheckpoint(root, fixtures.back()->contents, /*keep_last=*/2).ok());
    CHECK(ReadLatest(root) == StepDirName(step) + "\n");
  }
  auto steps = ListCheckpointSteps(root);
  REQUIRE(steps.ok());
  CHECK(*steps == std::vector<int64_t>{30, 40});
  auto ck = LoadCheckpoint(root);
  REQUIRE(ck.ok());
  CheckMatches(*ck, fixtures.back()->contents);
}

TEST_CASE("Checkpoint: re-saving a step replaces it", "[ckpt]") {
  std::string root = MakeTempDir("ck_resave");
  Fixture a(5, 1), b(5, 99);
  REQUIRE(SaveCheckpoint(root, a.contents).ok());
  REQUIRE(SaveCheckpoint(root, b.contents).ok());
  auto ck = LoadCheckpoint(root);
  REQUIRE(ck.ok());
  CheckMatches(*ck, b.contents);
  auto names = ListDir(root);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"latest", "step_00000005"});
}

TEST_CASE("Checkpoint: each crash point leaves the previous checkpoint loadable", "[ckpt]") {
  auto point = GENERATE(CrashPoint::kAfterModelFile, CrashPoint::kBeforeRename,
                        CrashPoint::kBeforeLatestUpdate);
  std::string root = MakeTempDir("ck_crash");
  Fixture first(10, 1), second(20, 2), third(30, 3);
  REQUIRE(SaveCheckpoint(root, first.contents).ok());

  SetCrashPointForTesting(point);
  Status s = SaveCheckpoint(root, second.contents);
  CHECK(s.code() == StatusCode::kAborted);
  CHECK(ReadLatest(root) == "step_00000010\n");
  auto ck = LoadCheckpoint(root);
  REQUIRE(ck.ok());
  CheckMatches(*ck, first.contents);
  bool tmp_left = PathExists(root + "/.tmp-step_00000020");
  CHECK(tmp_left == (point != CrashPoint::kBeforeLatestUpdate));

  // The next save cleans up and moves `latest`; the hook fired only once.
  REQUIRE(SaveCheckpoint(root, third.contents).ok());
  CHECK_FALSE(PathExists(root + "/.tmp-step_00000020"));
  auto ck3 = LoadCheckpoint(root);
  REQUIRE(ck3.ok());
  CheckMatches(*ck3, third.contents);
  CHECK(LoadCheckpoint(root + "/step_00000010").ok());
}

}  // namespace
}  // namespace ds::ckpt
