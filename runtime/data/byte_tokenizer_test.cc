#include "runtime/data/byte_tokenizer.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/data/test_files.h"
#include "runtime/data/token_file.h"

namespace ds::data {
namespace {

TEST_CASE("ByteTokenizer: every byte round-trips, through a token file too", "[data]") {
  std::string text = "Hello, world!\n\xc3\xa9t\xc3\xa9 ";  // UTF-8 stays bytes
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  const std::vector<uint32_t> tokens = ByteEncode(text);
  REQUIRE(tokens.size() == text.size());
  CHECK(tokens[0] == 'H');
  CHECK(tokens[14] == 0xc3);

  const std::string path = testing::TempPath("bytes.tok");
  REQUIRE(WriteTokenFile(path, tokens, TokenDType::kUint16, kByteVocabSize).ok());
  StatusOr<std::unique_ptr<TokenFile>> f = TokenFile::Open(path);
  REQUIRE(f.ok());
  CHECK((*f)->vocab_size() == 256);
  std::vector<int32_t> ids(static_cast<size_t>((*f)->size()));
  (*f)->Copy(0, (*f)->size(), ids.data());
  StatusOr<std::string> back = ByteDecode(ids.data(), ids.size());
  REQUIRE(back.ok());
  CHECK(*back == text);
}

TEST_CASE("ByteTokenizer: decode rejects non-byte tokens", "[data]") {
  const int32_t bad[] = {65, 256};
  StatusOr<std::string> s = ByteDecode(bad, 2);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message() == "token 256 at 1 is not a byte (vocab 256)");
  CHECK(ByteEncode("").empty());
}

}  // namespace
}  // namespace ds::data
