#include "runtime/data/token_file.h"

#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/data/test_files.h"

namespace ds::data {
namespace {

using testing::PutU16;
using testing::PutU32;
using testing::ReadBytes;
using testing::TempPath;
using testing::WriteBytes;

std::vector<int32_t> All(const TokenFile& f) {
  std::vector<int32_t> out(static_cast<size_t>(f.size()));
  f.Copy(0, f.size(), out.data());
  return out;
}

// A DSTOKENS header with the given fields (little-endian), then `tokens` as uint16.
std::vector<uint8_t> DsFile(uint32_t version, uint32_t dtype, uint64_t count,
                            const std::vector<uint16_t>& tokens) {
  std::vector<uint8_t> b(kTokenFileMagic, kTokenFileMagic + 8);
  PutU32(&b, version);
  PutU32(&b, dtype);
  PutU32(&b, static_cast<uint32_t>(count));
  PutU32(&b, static_cast<uint32_t>(count >> 32));
  PutU32(&b, 0);
  PutU32(&b, 0);
  for (uint16_t t : tokens) PutU16(&b, t);
  return b;
}

std::vector<uint8_t> LlmcFile(int32_t magic, int32_t version, int32_t count,
                              const std::vector<uint16_t>& tokens) {
  std::vector<uint8_t> b;
  PutU32(&b, static_cast<uint32_t>(magic));
  PutU32(&b, static_cast<uint32_t>(version));
  PutU32(&b, static_cast<uint32_t>(count));
  for (int i = 3; i < 256; ++i) PutU32(&b, 0);
  for (uint16_t t : tokens) PutU16(&b, t);
  return b;
}

// Opens `bytes` written to a scratch file; returns the error message ("" if it opened).
std::string OpenError(const std::string& name, const std::vector<uint8_t>& bytes,
                      TokenFileFormat format = TokenFileFormat::kAuto,
                      StatusCode code = StatusCode::kDataLoss) {
  const std::string path = TempPath(name);
  REQUIRE(WriteBytes(path, bytes));
  StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(path, format);
  if (f.ok()) return "";
  CHECK(f.status().code() == code);
  CHECK(f.status().message().find(path) != std::string::npos);  // names the file
  return f.status().message();
}

TEST_CASE("TokenFile: DSTOKENS round trip and exact header layout", "[data]") {
  const std::string path = TempPath("rt16.tok");
  const std::vector<uint32_t> tokens = {0, 1, 255, 300, 65535, 7};
  REQUIRE(WriteTokenFile(path, tokens, TokenDType::kUint16, 65536).ok());
  const std::vector<uint8_t> bytes = ReadBytes(path);
  REQUIRE(bytes.size() == 32 + 2 * tokens.size());
  CHECK(std::memcmp(bytes.data(), "DSTOKENS", 8) == 0);
  CHECK(bytes[8] == 1);   // version
  CHECK(bytes[12] == 2);  // dtype
  CHECK(bytes[16] == 6);  // count
  CHECK(bytes[24] == 0);  // vocab 65536 = 0x10000
  CHECK(bytes[26] == 1);
  CHECK(bytes[32 + 2 * 3] == (300 & 0xff));
  CHECK(bytes[32 + 2 * 3 + 1] == (300 >> 8));
  CHECK(ReadBytes(path + ".tmp").empty());  // renamed away

  StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(path);
  REQUIRE(f.ok());
  CHECK((*f)->format() == TokenFileFormat::kDs);
  CHECK((*f)->dtype() == TokenDType::kUint16);
  CHECK((*f)->size() == 6);
  CHECK((*f)->vocab_size() == 65536);
  CHECK((**f)[4] == 65535);
  CHECK(All(**f) == std::vector<int32_t>{0, 1, 255, 300, 65535, 7});

  const std::string path32 = TempPath("rt32.tok");
  REQUIRE(WriteTokenFile(path32, {5, 100000, 128255}, TokenDType::kUint32, 128256).ok());
  StatusOr<std::unique_ptr<TokenFile>> g = TokenFile::Open(path32, TokenFileFormat::kDs);
  REQUIRE(g.ok());
  CHECK((*g)->dtype() == TokenDType::kUint32);
  CHECK(All(**g) == std::vector<int32_t>{5, 100000, 128255});
}

TEST_CASE("TokenFile: the writer rejects tokens that do not fit", "[data]") {
  const std::string path = TempPath("bad_write.tok");
  Status s = WriteTokenFile(path, {1, 70000}, TokenDType::kUint16, 0);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("70000") != std::string::npos);
  s = WriteTokenFile(path, {1, 256}, TokenDType::kUint16, 256);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("vocab size 256") != std::string::npos);
  CHECK(ReadBytes(path).empty());
  CHECK(ReadBytes(path + ".tmp").empty());
}

TEST_CASE("TokenFile: raw uint16 and llm.c files", "[data]") {
  std::vector<uint8_t> raw;
  for (uint16_t t : {10, 20, 30, 40000}) PutU16(&raw, t);
  const std::string raw_path = TempPath("train.bin");
  REQUIRE(WriteBytes(raw_path, raw));
  for (TokenFileFormat format : {TokenFileFormat::kAuto, TokenFileFormat::kUint16}) {
    StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(raw_path, format);
    REQUIRE(f.ok());
    CHECK((*f)->format() == TokenFileFormat::kUint16);
    CHECK(All(**f) == std::vector<int32_t>{10, 20, 30, 40000});
  }

  const std::string llmc_path = TempPath("shard_000000.bin");
  REQUIRE(WriteBytes(llmc_path, LlmcFile(kLlmcMagic, 1, 3, {50256, 1, 2})));
  StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(llmc_path);
  REQUIRE(f.ok());
  CHECK((*f)->format() == TokenFileFormat::kLlmc);
  CHECK(All(**f) == std::vector<int32_t>{50256, 1, 2});
  // Forcing uint16 reads the header as tokens: the caller asked for it.
  StatusOr<std::unique_ptr<TokenFile>> as_raw =
      TokenFile::Open(llmc_path, TokenFileFormat::kUint16);
  REQUIRE(as_raw.ok());
  CHECK((*as_raw)->size() == 512 + 3);
}

TEST_CASE("TokenFile: each broken file names the file and the problem", "[data]") {
  SECTION("missing") {
    StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(TempPath("nope.tok"));
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == StatusCode::kNotFound);
    CHECK(f.status().message().find("nope.tok") != std::string::npos);
  }
  SECTION("truncated DSTOKENS header") {
    std::vector<uint8_t> b = DsFile(1, 2, 0, {});
    b.resize(20);
    CHECK(OpenError("trunc.tok", b).find("truncated header: 20 bytes") != std::string::npos);
  }
  SECTION("bad magic when the format says ds") {
    std::vector<uint8_t> b = DsFile(1, 2, 2, {1, 2});
    b[0] = 'X';
    CHECK(OpenError("magic.tok", b, TokenFileFormat::kDs).find("bad magic") != std::string::npos);
  }
  SECTION("bad version") {
    CHECK(OpenError("version.tok", DsFile(2, 2, 2, {1, 2})).find("version 2") != std::string::npos);
  }
  SECTION("bad dtype") {
    CHECK(OpenError("dtype.tok", DsFile(1, 3, 2, {1, 2})).find("bad token dtype 3") !=
          std::string::npos);
  }
  SECTION("count disagrees with the file size") {
    CHECK(OpenError("count.tok", DsFile(1, 2, 5, {1, 2}))
              .find("header says 5 tokens (42 bytes) but the file has 36 bytes") !=
          std::string::npos);
    std::vector<uint8_t> truncated = DsFile(1, 2, 3, {1, 2, 3});
    truncated.pop_back();
    CHECK(OpenError("count2.tok", truncated).find("header says 3 tokens") != std::string::npos);
  }
  SECTION("raw file with an odd size") {
    CHECK(OpenError("odd.bin", {1, 2, 3}).find("3 bytes is not a whole number of uint16") !=
          std::string::npos);
  }
  SECTION("llm.c: truncated header, version, count") {
    std::vector<uint8_t> b = LlmcFile(kLlmcMagic, 1, 2, {1, 2});
    b.resize(100);
    CHECK(OpenError("llmc_trunc.bin", b).find("truncated llm.c header") != std::string::npos);
    CHECK(
        OpenError("llmc_version.bin", LlmcFile(kLlmcMagic, 7, 2, {1, 2})).find("llm.c version 7") !=
        std::string::npos);
    CHECK(OpenError("llmc_count.bin", LlmcFile(kLlmcMagic, 1, 9, {1, 2}))
              .find("header says 9 tokens") != std::string::npos);
    CHECK(OpenError("llmc_magic.bin", LlmcFile(1234, 1, 2, {1, 2}), TokenFileFormat::kLlmc)
              .find("bad llm.c magic 1234") != std::string::npos);
  }
}

}  // namespace
}  // namespace ds::data
