// HfWeights on folders written here: one model.safetensors, and shards with transformers'
// index; and each broken index or shard gets its one error naming the file and the tensor.
#include "runtime/ckpt/hf_weights.h"

#include <catch2/catch.hpp>
#include <string>

#include "runtime/ckpt/file_util.h"
#include "runtime/ckpt/hf_shards.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

using testing::MakeTempDir;
using testing::RandomTensor;
using testing::SameBytes;
using testing::WriteRawFile;

struct Model {
  OwnedTensor a = RandomTensor({3, 4}, DType::kF32, 1);
  OwnedTensor b = RandomTensor({5}, DType::kBF16, 2);
  OwnedTensor c = RandomTensor({2, 2}, DType::kF16, 3);
};

void Write(const std::string& path, const std::vector<NamedTensor>& tensors) {
  REQUIRE(WriteSafetensors(path, tensors).ok());
}

// a and b in shard 1, c in shard 2, and the index that says so (with `extra` map entries).
std::string Sharded(const Model& m, const std::string& tag, const std::string& extra = "") {
  const std::string dir = MakeTempDir(tag);
  Write(JoinPath(dir, "model-00001-of-00002.safetensors"), {{"a", m.a.view()}, {"b", m.b.view()}});
  Write(JoinPath(dir, "model-00002-of-00002.safetensors"), {{"c", m.c.view()}});
  WriteRawFile(JoinPath(dir, "model.safetensors.index.json"),
               "{\"metadata\": {\"total_size\": 66}, \"weight_map\": {"
               "\"a\": \"model-00001-of-00002.safetensors\", "
               "\"b\": \"model-00001-of-00002.safetensors\", " +
                   extra + "\"c\": \"model-00002-of-00002.safetensors\"}}");
  return dir;
}

void CheckModel(const HfWeights& w, const Model& m) {
  REQUIRE(w.tensors().size() == 3);
  CHECK(w.tensors()[0].name == "a");
  CHECK(w.tensors()[1].name == "b");
  CHECK(w.tensors()[2].name == "c");
  CHECK(SameBytes(w.tensors()[0].tensor, m.a.view()));
  CHECK(SameBytes(w.tensors()[1].tensor, m.b.view()));
  CHECK(SameBytes(w.tensors()[2].tensor, m.c.view()));
}

std::string ErrorOf(const std::string& path) {
  StatusOr<HfWeights> w = HfWeights::Open(path);
  REQUIRE_FALSE(w.ok());
  return w.status().ToString();
}

TEST_CASE("HfWeights: one model.safetensors, and shards with their index", "[ckpt][hf]") {
  const Model m;
  const std::string one = MakeTempDir("hf_one");
  Write(JoinPath(one, "model.safetensors"),
        {{"c", m.c.view()}, {"a", m.a.view()}, {"b", m.b.view()}});
  StatusOr<HfWeights> single = HfWeights::Open(one);
  REQUIRE(single.ok());
  CHECK(single->shard_count() == 1);
  CHECK(single->label() == JoinPath(one, "model.safetensors"));
  CheckModel(*single, m);

  const std::string dir = Sharded(m, "hf_sharded");
  StatusOr<HfWeights> sharded = HfWeights::Open(dir);
  INFO(sharded.status().ToString());
  REQUIRE(sharded.ok());
  CHECK(sharded->shard_count() == 2);
  CHECK(sharded->label() == JoinPath(dir, "model.safetensors.index.json"));
  CheckModel(*sharded, m);
  // The index file itself opens the same way.
  StatusOr<HfWeights> by_index = HfWeights::Open(JoinPath(dir, "model.safetensors.index.json"));
  REQUIRE(by_index.ok());
  CheckModel(*by_index, m);
}

TEST_CASE("HfWeights: a broken folder gets one error naming the file and the tensor",
          "[ckpt][hf]") {
  const Model m;
  CHECK_THAT(ErrorOf(MakeTempDir("hf_empty")),
             Catch::Contains("no model.safetensors or model.safetensors.index.json"));

  std::string dir = Sharded(m, "hf_missing");
  std::remove(JoinPath(dir, "model-00002-of-00002.safetensors").c_str());
  CHECK_THAT(ErrorOf(dir), Catch::Contains("model.safetensors.index.json: shard "
                                           "model-00002-of-00002.safetensors (of \"c\")"));

  dir = Sharded(m, "hf_unheld", "\"d\": \"model-00002-of-00002.safetensors\", ");
  CHECK_THAT(ErrorOf(dir), Catch::Contains("tensor \"d\" is mapped to "
                                           "model-00002-of-00002.safetensors, which does not "
                                           "hold it"));

  dir = Sharded(m, "hf_extra");
  Write(JoinPath(dir, "model-00002-of-00002.safetensors"),
        {{"c", m.c.view()}, {"stray", m.b.view()}});
  CHECK_THAT(ErrorOf(dir), Catch::Contains("model-00002-of-00002.safetensors: tensor \"stray\" "
                                           "is not in the weight_map of"));

  dir = Sharded(m, "hf_elsewhere");
  Write(JoinPath(dir, "model-00002-of-00002.safetensors"), {{"c", m.c.view()}, {"b", m.b.view()}});
  CHECK_THAT(ErrorOf(dir), Catch::Contains("tensor \"b\" is mapped to "
                                           "model-00001-of-00002.safetensors by"));

  dir = Sharded(m, "hf_escape", "\"e\": \"../model.safetensors\", ");
  CHECK_THAT(ErrorOf(dir), Catch::Contains("the weight_map entry of \"e\" must be a shard file "
                                           "name beside the index"));

  dir = MakeTempDir("hf_nomap");
  WriteRawFile(JoinPath(dir, "model.safetensors.index.json"), "{\"metadata\": {}}");
  CHECK_THAT(ErrorOf(dir),
             Catch::Contains("model.safetensors.index.json: no \"weight_map\" object"));
}

// WriteHfFolder's shards read back through HfWeights; the sizes as transformers spells them.
TEST_CASE("WriteHfFolder: shards of at most max_shard_size, read back whole", "[ckpt][hf]") {
  const Model m;  // a 48 bytes, b 10, c 8
  const std::vector<NamedTensor> t = {{"a", m.a.view()}, {"b", m.b.view()}, {"c", m.c.view()}};
  const std::string dir = MakeTempDir("hf_write");
  StatusOr<int> shards = WriteHfFolder(dir, t, 50, {{"format", "pt"}});
  REQUIRE(shards.ok());
  CHECK(*shards == 2);  // a (48); b + c (18)
  CHECK(PathExists(JoinPath(dir, "model-00001-of-00002.safetensors")));
  StatusOr<HfWeights> back = HfWeights::Open(dir);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->shard_count() == 2);
  CheckModel(*back, m);
  // A tensor larger than the limit gets a shard of its own; an export that fits one file
  // replaces the shards and the index.
  REQUIRE(*WriteHfFolder(dir, t, 9, {}) == 3);
  CHECK_FALSE(PathExists(JoinPath(dir, "model-00001-of-00002.safetensors")));
  CheckModel(*HfWeights::Open(dir), m);
  REQUIRE(*WriteHfFolder(dir, t, 1000, {}) == 1);
  CHECK(PathExists(JoinPath(dir, "model.safetensors")));
  CHECK_FALSE(PathExists(JoinPath(dir, "model.safetensors.index.json")));
  CHECK_FALSE(PathExists(JoinPath(dir, "model-00003-of-00003.safetensors")));
  CheckModel(*HfWeights::Open(dir), m);

  CHECK(*ParseShardSize("5GB") == 5000000000);
  CHECK(*ParseShardSize("2GiB") == int64_t{2} << 30);
  CHECK(*ParseShardSize("500mb") == 500000000);
  CHECK(*ParseShardSize("20KB") == 20000);
  CHECK(*ParseShardSize("4096") == 4096);
  CHECK_THAT(ParseShardSize("5XB").status().message(), Catch::Contains("\"5XB\": expected"));
  CHECK_FALSE(ParseShardSize("0").ok());
  CHECK_FALSE(ParseShardSize("GB").ok());
}

}  // namespace
}  // namespace ds::ckpt
