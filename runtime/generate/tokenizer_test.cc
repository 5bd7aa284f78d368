// LoadTokenizer by file: a SentencePiece model (trained by tools/hf_tokenizer_golden.py with the
// sentencepiece package: BPE with byte fallback, Llama-2's kind) gives the package's ids and
// decoded text for texts with Unicode, emoji, whitespace runs and newlines (its NFKC normalizer
// included); a tokenizer.json loads as byte-level BPE; other files are refused by name.
#include "runtime/generate/tokenizer.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/base/json.h"
#include "runtime/generate/generate_testing.h"

namespace ds::generate {
namespace {

using testing::TestData;

// Through the Tokenizer interface.
void CheckCases(const Tokenizer& t, const std::string& file) {
  testing::CheckTokenizerGolden(t, file, 10);
}

TEST_CASE("tokenizer: SentencePiece ids and text equal the sentencepiece package's",
          "[generate][tokenizer]") {
  auto t = LoadTokenizer(TestData("sp.model"));
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  CheckCases(**t, "sp_golden.json");
  CHECK_FALSE((*t)->Decode({-1}).ok());
}

TEST_CASE("tokenizer: a tokenizer.json loads as byte-level BPE; other files are refused",
          "[generate][tokenizer]") {
  auto bpe = LoadTokenizer(TestData("tokenizer.json"));
  REQUIRE(bpe.ok());
  CheckCases(**bpe, "tokenizer_golden.json");
  auto other = LoadTokenizer(TestData("hf_golden.json.txt"));
  CHECK(other.status().code() == StatusCode::kNotFound);
  auto json_as_model = LoadTokenizer(TestData("gpt2/config.json"));
  REQUIRE_FALSE(json_as_model.ok());  // a .json that is no tokenizer
  auto unknown = LoadTokenizer(TestData("gpt2/generation_config.json"));
  REQUIRE_FALSE(unknown.ok());
  auto none = LoadDirTokenizer(TestData("gpt2"));
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
  std::ofstream(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                "/vocab.txt")
      << "a\n";
  auto txt = LoadTokenizer(
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/vocab.txt");
  REQUIRE_FALSE(txt.ok());
  CHECK(txt.status().message().find("unknown tokenizer format") != std::string::npos);
}

}  // namespace
}  // namespace ds::generate
