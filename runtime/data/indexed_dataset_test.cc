// Megatron indexed datasets against megatron-core: testdata/megatron was written by its
// IndexedDatasetBuilder (tools/megatron_indexed_golden.py). The reader must read those files,
// the writer must write the same bytes for the same documents, and damaged files must be
// refused naming the file.
#include "runtime/data/indexed_dataset.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/data/test_files.h"

namespace ds::data {
namespace {

using Docs = std::vector<std::vector<int64_t>>;
const std::string kGolden = "runtime/data/testdata/megatron/";
const Docs kDoc3 = {{5, 6, 7, 0}, {8, 9, 0}, {10, 11, 12, 13, 14, 0}};
const Docs kMixed = {{70000, 1, 65535, 65536, 128255}, {}, {3}, {128000, 9, 9, 9, 2}};

Docs ReadAll(const IndexedDataset& d) {
  Docs out(d.sequences());
  for (int64_t i = 0; i < d.sequences(); ++i) REQUIRE(d.Tokens(i, &out[i]).ok());
  return out;
}

std::string Write(const std::string& name, IndexedDtype t, const Docs& docs) {
  const std::string prefix = testing::TempPath(name);
  IndexedDatasetWriter w(prefix, t);
  for (const auto& d : docs) REQUIRE(w.AddDocument(d).ok());
  REQUIRE(w.Finalize().ok());
  return prefix;
}

TEST_CASE("IndexedDataset reads what megatron-core wrote", "[data][megatron]") {
  StatusOr<IndexedDataset> a = IndexedDataset::Open(kGolden + "doc3_uint16");
  REQUIRE(a.ok());
  CHECK(a->dtype() == IndexedDtype::kUint16);
  CHECK(a->sequences() == 3);
  CHECK(a->documents() == 3);
  CHECK(a->total_tokens() == 13);
  CHECK(a->sequence_pointer(2) == 14);
  CHECK(ReadAll(*a) == kDoc3);
  std::vector<int64_t> part;
  REQUIRE(a->Tokens(2, &part, 1, 3).ok());
  CHECK(part == std::vector<int64_t>{11, 12, 13});
  CHECK(a->Tokens(2, &part, 4, 3).code() == StatusCode::kOutOfRange);
  CHECK(a->Tokens(3, &part).code() == StatusCode::kOutOfRange);

  StatusOr<IndexedDataset> b = IndexedDataset::Open(kGolden + "mixed_int32");
  REQUIRE(b.ok());
  CHECK(b->dtype() == IndexedDtype::kInt32);
  CHECK(ReadAll(*b) == kMixed);
  for (int64_t j = 0; j <= b->documents(); ++j) CHECK(b->document_index(j) == j);
}

TEST_CASE("IndexedDatasetWriter writes megatron-core's bytes", "[data][megatron]") {
  for (const auto& [name, t, docs] :
       {std::tuple{std::string("doc3_uint16"), IndexedDtype::kUint16, kDoc3},
        std::tuple{std::string("mixed_int32"), IndexedDtype::kInt32, kMixed}}) {
    CAPTURE(name);
    const std::string ours = Write("ours_" + name, t, docs);
    CHECK(testing::ReadBytes(ours + ".bin") == testing::ReadBytes(kGolden + name + ".bin"));
    CHECK(testing::ReadBytes(ours + ".idx") == testing::ReadBytes(kGolden + name + ".idx"));
  }
  CHECK(IndexedDtypeForVocab(50257) == IndexedDtype::kUint16);
  CHECK(IndexedDtypeForVocab(128256) == IndexedDtype::kInt32);
}

TEST_CASE("every integer dtype of the format round-trips", "[data][megatron]") {
  const Docs docs = {{0, 1, 100}, {}, {127, 2}};
  for (IndexedDtype t : {IndexedDtype::kUint8, IndexedDtype::kInt8, IndexedDtype::kInt16,
                         IndexedDtype::kInt32, IndexedDtype::kInt64, IndexedDtype::kUint16}) {
    CAPTURE(IndexedDtypeName(t));
    StatusOr<IndexedDataset> d = IndexedDataset::Open(Write("rt", t, docs));
    REQUIRE(d.ok());
    CHECK(d->dtype() == t);
    CHECK(ReadAll(*d) == docs);
  }
  // Float datasets exist in the format but hold no token ids.
  StatusOr<IndexedDataset> f = IndexedDataset::Open(Write("rt_f32", IndexedDtype::kFloat32, docs));
  REQUIRE(f.ok());
  std::vector<int64_t> row;
  CHECK(f->Tokens(0, &row).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("IndexedDatasetWriter refuses what the dtype cannot hold and leaves no half dataset",
          "[data][megatron]") {
  const std::string prefix = testing::TempPath("refused");
  {
    IndexedDatasetWriter w(prefix, IndexedDtype::kUint16);
    REQUIRE(w.AddDocument({1, 2}).ok());
    const Status s = w.AddDocument({3, 65536});
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("65536 of document 1 does not fit uint16") != std::string::npos);
  }  // destroyed unfinalized
  CHECK(testing::ReadBytes(prefix + ".bin").empty());
  CHECK(std::fopen((prefix + ".bin.tmp").c_str(), "rb") == nullptr);
  CHECK(std::fopen((prefix + ".idx").c_str(), "rb") == nullptr);
}

// A copy of the golden doc3 dataset with `edit` applied to its .idx (or .bin) bytes.
std::string Damaged(const std::string& name, bool idx, void (*edit)(std::vector<uint8_t>*)) {
  const std::string prefix = testing::TempPath(name);
  std::vector<uint8_t> i = testing::ReadBytes(kGolden + "doc3_uint16.idx");
  std::vector<uint8_t> b = testing::ReadBytes(kGolden + "doc3_uint16.bin");
  edit(idx ? &i : &b);
  REQUIRE(testing::WriteBytes(prefix + ".idx", i));
  REQUIRE(testing::WriteBytes(prefix + ".bin", b));
  return prefix;
}

void ExpectRefused(const std::string& prefix, const std::string& file, const std::string& what) {
  StatusOr<IndexedDataset> d = IndexedDataset::Open(prefix);
  REQUIRE_FALSE(d.ok());
  INFO(d.status().ToString());
  CHECK(d.status().message().find(prefix + file) != std::string::npos);
  CHECK(d.status().message().find(what) != std::string::npos);
}

TEST_CASE("damaged indexed datasets are refused naming the file", "[data][megatron]") {
  ExpectRefused(Damaged("magic", true, [](auto* v) { (*v)[0] = 'X'; }), ".idx", "no MMIDIDX");
  ExpectRefused(Damaged("version", true, [](auto* v) { (*v)[9] = 2; }), ".idx", "version 2");
  ExpectRefused(Damaged("dtype", true, [](auto* v) { (*v)[17] = 9; }), ".idx", "dtype code 9");
  ExpectRefused(Damaged("short_idx", true, [](auto* v) { v->resize(v->size() - 8); }), ".idx",
                "need 102 bytes; the file has 94");
  ExpectRefused(Damaged("short_bin", false, [](auto* v) { v->resize(v->size() - 2); }), ".bin",
                "24 bytes, but its index addresses 26");
  // The second pointer (byte 34 + 12 + 8) moved by one token.
  ExpectRefused(Damaged("pointer", true, [](auto* v) { (*v)[54] = 10; }), ".idx",
                "sequence 1 has length 3 at byte 10; expected byte 8");
  // The last document index (3) made 2.
  ExpectRefused(Damaged("docs", true, [](auto* v) { (*v)[v->size() - 8] = 2; }), ".idx",
                "document index 3 is 2");
  StatusOr<IndexedDataset> missing = IndexedDataset::Open(testing::TempPath("nothing_here"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("nothing_here.idx") != std::string::npos);
}

}  // namespace
}  // namespace ds::data
