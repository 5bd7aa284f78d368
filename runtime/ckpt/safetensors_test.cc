#include "runtime/ckpt/safetensors.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "runtime/ckpt/test_util.h"

namespace ds::ckpt {
namespace {

using testing::MakeTempDir;
using testing::RandomTensor;
using testing::SameBytes;

// A safetensors file from a raw header text and `data_bytes` zero bytes of data.
std::string RawFile(const std::string& header, size_t data_bytes, uint64_t len_override = 0) {
  uint64_t n = len_override ? len_override : header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  return out + header + std::string(data_bytes, '\0');
}

// Opens a file holding `bytes`; returns the error message ("" when it opened).
std::string OpenError(const std::string& dir, const std::string& bytes) {
  std::string path = dir + "/bad.safetensors";
  testing::WriteRawFile(path, bytes);
  auto f = SafetensorsFile::Open(path);
  if (f.ok()) return "";
  CHECK(f.status().code() == StatusCode::kDataLoss);
  CHECK(f.status().message().rfind(path + ": ", 0) == 0);  // names the file
  return f.status().message();
}

TEST_CASE("Safetensors: round trip of every dtype with metadata", "[ckpt][safetensors]") {
  std::string dir = MakeTempDir("st_roundtrip");
  std::string path = dir + "/w.safetensors";
  OwnedTensor a = RandomTensor({3, 5}, DType::kBF16, 1);  // 30 bytes: would misalign f32
  OwnedTensor b = RandomTensor({4, 2}, DType::kF32, 2);
  OwnedTensor c = RandomTensor({7}, DType::kI32, 3);
  OwnedTensor d = RandomTensor({2, 2}, DType::kI64, 4);
  OwnedTensor e = RandomTensor({3}, DType::kF16, 5);
  OwnedTensor f = RandomTensor({}, DType::kU16, 6);  // scalar
  OwnedTensor g({0, 4}, DType::kF32);                // empty
  std::vector<NamedTensor> in = {{"a", a.view()}, {"b", b.view()}, {"c", c.view()}, {"d", d.view()},
                                 {"e", e.view()}, {"f", f.view()}, {"g", g.view()}};
  auto w = WriteSafetensors(path, in, {{"format", "pt"}, {"note", "q\"uote"}});
  REQUIRE(w.ok());
  CHECK(w->tensor_crc32c.size() == in.size());

  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK(file->file_bytes() == w->file_bytes);
  CHECK(file->data_start() % 8 == 0);
  CHECK(file->metadata().at("format") == "pt");
  CHECK(file->metadata().at("note") == "q\"uote");
  REQUIRE(file->tensors().size() == in.size());
  for (const NamedTensor& t : in) {
    auto got = file->Get(t.name);
    REQUIRE(got.ok());
    CHECK(SameBytes(*got, t.tensor));
    const SafetensorsEntry* e = file->Find(t.name);
    uintptr_t addr = reinterpret_cast<uintptr_t>(e->data);
    CHECK(addr % DTypeSize(t.tensor.dtype()) == 0);  // aligned by the size ordering
  }
  CHECK_FALSE(PathExists(path + ".tmp"));
  auto missing = file->Get("nope");
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("Safetensors: copy-out converts bf16 to f32", "[ckpt][safetensors]") {
  std::string dir = MakeTempDir("st_copy");
  OwnedTensor a = RandomTensor({16}, DType::kBF16, 9);
  REQUIRE(WriteSafetensors(dir + "/a.safetensors", {{"a", a.view()}}).ok());
  auto file = SafetensorsFile::Open(dir + "/a.safetensors");
  REQUIRE(file.ok());
  auto f32 = file->CopyOut("a", DType::kF32);
  REQUIRE(f32.ok());
  CHECK(f32->view().dtype() == DType::kF32);
  for (int i = 0; i < 16; ++i) CHECK(f32->f32()[i] == Bf16ToFloat(a.view().u16()[i]));
  auto same = file->CopyOut("a");
  REQUIRE(same.ok());
  CHECK(SameBytes(same->view(), a.view()));
  OwnedTensor ints = RandomTensor({2}, DType::kI32, 1);
  CHECK(CopyTensorAs(ints.view(), DType::kF32).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("Safetensors: writer rejects bad input", "[ckpt][safetensors]") {
  std::string dir = MakeTempDir("st_writer");
  OwnedTensor a = RandomTensor({2}, DType::kF32, 1);
  auto dup = WriteSafetensors(dir + "/x.safetensors", {{"a", a.view()}, {"a", a.view()}});
  CHECK(dup.status().code() == StatusCode::kInvalidArgument);
  CHECK(dup.status().message().find("duplicate tensor name a") != std::string::npos);
  auto meta = WriteSafetensors(dir + "/x.safetensors", {{"__metadata__", a.view()}});
  CHECK_FALSE(meta.ok());
  auto nodata =
      WriteSafetensors(dir + "/x.safetensors", {{"z", Tensor(nullptr, {2}, DType::kF32)}});
  CHECK_FALSE(nodata.ok());
}

TEST_CASE("Safetensors: an empty file list is valid", "[ckpt][safetensors]") {
  std::string dir = MakeTempDir("st_empty");
  REQUIRE(WriteSafetensors(dir + "/e.safetensors", {}).ok());
  auto f = SafetensorsFile::Open(dir + "/e.safetensors");
  REQUIRE(f.ok());
  CHECK(f->tensors().empty());
}

TEST_CASE("Safetensors: header validation", "[ckpt][safetensors]") {
  std::string dir = MakeTempDir("st_bad");
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  REQUIRE(OpenError(dir, RawFile("{" + ok_entry + "}", 8)).empty());

  SECTION("file shorter than the length field") {
    CHECK(OpenError(dir, "abc").find("too short") != std::string::npos);
  }
  SECTION("header length larger than file") {
    std::string e = OpenError(dir, RawFile("{" + ok_entry + "}", 8, 1 << 20));
    CHECK(e.find("header length 1048576 larger than file") != std::string::npos);
  }
  SECTION("invalid JSON") {
    CHECK(OpenError(dir, RawFile("{\"a\": [", 0)).find("invalid header JSON") != std::string::npos);
    CHECK(OpenError(dir, RawFile("[1, 2]  ", 0)).find("invalid header JSON") != std::string::npos);
  }
  SECTION("unknown dtype") {
    std::string e =
        OpenError(dir, RawFile(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8));
    CHECK(e.find("tensor a: unknown dtype 'F64'") != std::string::npos);
  }
  SECTION("offsets out of range") {
    std::string e =
        OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
    CHECK(e.find("tensor a: data_offsets [0, 16] out of range (data section is 8 bytes)") !=
          std::string::npos);
  }
  SECTION("offsets overlapping") {
    std::string e =
        OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               12));
    CHECK(e.find("tensor b: data_offsets [4, 12] overlap tensor a") != std::string::npos);
  }
  SECTION("offsets not matching shape * dtype size") {
    std::string e =
        OpenError(dir, RawFile(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8));
    CHECK(e.find("span 8 bytes but shape [3] of BF16 needs 6") != std::string::npos);
  }
  SECTION("gap and trailing bytes") {
    std::string gap =
        OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
    CHECK(gap.find("gap of 4 bytes") != std::string::npos);
    std::string tail =
        OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8));
    CHECK(tail.find("4 trailing bytes") != std::string::npos);
  }
  SECTION("duplicate names") {
    std::string e = OpenError(dir, RawFile("{" + ok_entry + "," + ok_entry + "}", 8));
    CHECK(e.find("duplicate tensor name a") != std::string::npos);
  }
  SECTION("malformed entries and metadata") {
    CHECK(!OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0))
               .empty());
    CHECK(!OpenError(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4))
               .empty());
    CHECK(OpenError(dir, RawFile(R"({"__metadata__":{"k":1}})", 0)).find("__metadata__") !=
          std::string::npos);
  }
  SECTION("missing file") {
    auto f = SafetensorsFile::Open(dir + "/nope.safetensors");
    CHECK(f.status().code() == StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace ds::ckpt
