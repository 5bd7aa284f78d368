// Checkpoint verification against real on-disk damage.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

using testing::MakeTempDir;
using testing::RandomTensor;

struct Saved {
  std::vector<OwnedTensor> owned;
  std::string root;
  std::string dir;
};

// A saved step-7 checkpoint with model tensors "a" (f32 [4,4]) and "h.0.ln_1.weight".
Saved SaveOne(const std::string& tag) {
  Saved s;
  s.root = MakeTempDir(tag);
  s.owned.push_back(RandomTensor({4, 4}, DType::kF32, 1));
  s.owned.push_back(RandomTensor({8}, DType::kF32, 2));
  s.owned.push_back(RandomTensor({8}, DType::kF32, 3));
  CheckpointContents c;
  c.step = 7;
  c.model = {{"a", s.owned[0].view()}, {"h.0.ln_1.weight", s.owned[1].view()}};
  c.optimizer = {{"exp_avg/a", s.owned[2].view()}};
  c.state["scheduler"] = R"({"lr": 0.5})";
  REQUIRE(SaveCheckpoint(s.root, c).ok());
  s.dir = s.root + "/step_00000007";
  return s;
}

std::string LoadError(const std::string& path, StatusCode code = StatusCode::kDataLoss) {
  auto ck = LoadCheckpoint(path);
  REQUIRE_FALSE(ck.ok());
  CHECK(ck.status().code() == code);
  return ck.status().message();
}

bool Contains(const std::string& s, const std::string& part) {
  INFO(s);
  return s.find(part) != std::string::npos;
}

TEST_CASE("Checkpoint: corrupted tensor byte names the tensor", "[ckpt]") {
  Saved s = SaveOne("ck_corrupt");
  const std::string model = s.dir + "/model.safetensors";
  auto sf = SafetensorsFile::Open(model);
  REQUIRE(sf.ok());
  const SafetensorsEntry* e = sf->Find("h.0.ln_1.weight");
  REQUIRE(e != nullptr);
  uint64_t at = sf->data_start() + e->begin + 5;
  testing::XorByteAt(model, at, 0x01);
  std::string msg = LoadError(s.root);
  CHECK(Contains(msg, model + ": tensor h.0.ln_1.weight checksum mismatch (manifest "));
  CHECK(Contains(msg, ", file "));
  // Without checksum verification the damage goes unnoticed (by design).
  CHECK(LoadCheckpoint(s.root, LoadOptions{false}).ok());
}

TEST_CASE("Checkpoint: corrupted header padding is caught by the file checksum", "[ckpt]") {
  Saved s = SaveOne("ck_corrupt_hdr");
  const std::string model = s.dir + "/model.safetensors";
  auto sf = SafetensorsFile::Open(model);
  REQUIRE(sf.ok());
  std::string bytes = testing::ReadRawFile(model);
  size_t last = sf->data_start() - 1;
  if (bytes[last] == ' ') {
    testing::XorByteAt(model, last, ' ' ^ '\t');  // still valid JSON whitespace
    CHECK(Contains(LoadError(s.root), model + ": file checksum mismatch"));
  } else {
    testing::XorByteAt(model, 9, 0x20);  // damage the JSON instead
    CHECK(Contains(LoadError(s.root), model + ":"));
  }
}

TEST_CASE("Checkpoint: truncated and missing files", "[ckpt]") {
  Saved s = SaveOne("ck_trunc");
  SECTION("truncated tensor file") {
    const std::string opt = s.dir + "/optimizer.safetensors";
    auto size = testing::ReadRawFile(opt).size();
    testing::TruncateFileTo(opt, size - 3);
    std::string msg = LoadError(s.root);
    CHECK(Contains(msg, opt + ": size " + std::to_string(size - 3) + " bytes, manifest says " +
                            std::to_string(size)));
  }
  SECTION("missing tensor file") {
    REQUIRE(RemoveTree(s.dir + "/model.safetensors").ok());
    CHECK(Contains(LoadError(s.root), s.dir + "/model.safetensors: missing"));
  }
  SECTION("missing state file") {
    REQUIRE(RemoveTree(s.dir + "/state.json").ok());
    CHECK(Contains(LoadError(s.dir), s.dir + "/state.json: missing"));
  }
  SECTION("missing manifest") {
    REQUIRE(RemoveTree(s.dir + "/manifest.json").ok());
    CHECK(Contains(LoadError(s.root), s.dir + "/manifest.json: missing"));
    CHECK(Contains(LoadError(s.dir), s.dir + "/manifest.json: missing"));
  }
  SECTION("latest names a missing directory") {
    REQUIRE(RemoveTree(s.dir).ok());
    CHECK(Contains(LoadError(s.root), "latest: names missing directory"));
  }
  SECTION("not a checkpoint at all") { LoadError(s.root + "/nope", StatusCode::kNotFound); }
}

TEST_CASE("Checkpoint: garbage manifest", "[ckpt]") {
  Saved s = SaveOne("ck_garbage");
  const std::string manifest = s.dir + "/manifest.json";
  SECTION("not JSON") {
    testing::WriteRawFile(manifest, "\x01\x02garbage{{");
    CHECK(Contains(LoadError(s.root), manifest + ": manifest is not valid JSON"));
  }
  SECTION("wrong format") {
    testing::WriteRawFile(manifest, R"({"format": "pytorch", "version": 1})");
    CHECK(Contains(LoadError(s.root), manifest + ": manifest format is 'pytorch'"));
  }
  SECTION("tensor in an unlisted file") {
    testing::WriteRawFile(manifest, R"({"format": "ds-checkpoint", "version": 1, "step": 7,
      "files": [], "tensors": [{"name": "a", "file": "x.safetensors", "dtype": "f32",
      "shape": [1], "crc32c": "00000000"}]})");
    CHECK(Contains(LoadError(s.root), "manifest tensor a: file x.safetensors is not listed"));
  }
  SECTION("step disagrees with the directory") {
    std::string text = testing::ReadRawFile(manifest);
    size_t at = text.find("\"step\": 7");
    REQUIRE(at != std::string::npos);
    text.replace(at, 9, "\"step\": 8");
    testing::WriteRawFile(manifest, text);
    CHECK(Contains(LoadError(s.root), "step 8 does not match the directory name step_00000007"));
  }
  SECTION("manifest missing a tensor the file has") {
    std::string text = testing::ReadRawFile(manifest);
    size_t begin = text.find("{\n      \"name\": \"a\"");
    REQUIRE(begin != std::string::npos);
    size_t end = text.find("},", begin);
    text.erase(begin, end + 2 - begin);
    testing::WriteRawFile(manifest, text);
    CHECK(Contains(LoadError(s.root), "tensor a is not listed in the manifest"));
  }
}

TEST_CASE("Checkpoint: a damaged safetensors header is reported with its path", "[ckpt]") {
  Saved s = SaveOne("ck_badhdr");
  const std::string model = s.dir + "/model.safetensors";
  testing::XorByteAt(model, 8, 0xFF);  // first header byte '{' -> garbage, same size
  CHECK(Contains(LoadError(s.root), model + ": invalid header JSON"));
}

}  // namespace
}  // namespace ds::ckpt
