// The byte-level BPE tokenizer against the tokenizers package: a small BPE trained by
// tools/hf_tokenizer_golden.py (GPT-2's ByteLevel pre-tokenizer, two special tokens) must give
// the package's ids for texts with Unicode letters and digits, punctuation, whitespace runs,
// newlines, contractions, emoji and special tokens, and decode them back to the text; so must
// one with Llama-3's pre-tokenizer. Files other than a byte-level BPE are refused naming the key.
#include "runtime/generate/bpe_tokenizer.h"

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

using testing::CheckTokenizerGolden;
using testing::ReadText;
using testing::TestData;

TEST_CASE("tokenizer: byte-level BPE ids equal the tokenizers package's", "[generate][tokenizer]") {
  auto tok = BpeTokenizer::Load(TestData("tokenizer.json"));
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());
  CHECK(tok->TokenId("<|endoftext|>") == 0);
  CheckTokenizerGolden(*tok, "tokenizer_golden.json", 10);  // byte-level: decoded == text
  CHECK_FALSE(tok->Decode({static_cast<int32_t>(tok->vocab_size())}).ok());
}

// Llama-3's pre-tokenizer: its Split pattern (digits in threes, case-insensitive contractions,
// newlines with punctuation), then ByteLevel without a regex; ignore_merges.
TEST_CASE("tokenizer: Llama-3's pre-tokenizer gives the tokenizers package's ids",
          "[generate][tokenizer]") {
  auto tok = BpeTokenizer::Load(TestData("tokenizer_llama3.json"));
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());
  CheckTokenizerGolden(*tok, "tokenizer_llama3_golden.json", 14);
}

TEST_CASE("tokenizer: other formats are refused by key", "[generate][tokenizer]") {
  const std::string good = ReadText(TestData("tokenizer.json"));
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  auto wordpiece =
      BpeTokenizer::FromJson(replaced("\"type\": \"BPE\"", "\"type\": \"WordPiece\""), "t.json");
  REQUIRE_FALSE(wordpiece.ok());
  CHECK(wordpiece.status().message().find("t.json: model.type is \"WordPiece\"") !=
        std::string::npos);
  auto meta = BpeTokenizer::FromJson(replaced("\"pre_tokenizer\": {\n    \"type\": \"ByteLevel\"",
                                              "\"pre_tokenizer\": {\n    \"type\": \"Metaspace\""),
                                     "t.json");
  REQUIRE_FALSE(meta.ok());
  CHECK(meta.status().message().find("pre_tokenizer \"Metaspace\"") != std::string::npos);
  CHECK_FALSE(BpeTokenizer::FromJson("{not json", "t.json").ok());
  CHECK_FALSE(BpeTokenizer::Load(TestData("missing.json")).ok());
}

}  // namespace
}  // namespace ds::generate
