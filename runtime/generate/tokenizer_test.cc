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

#include "runtime/ckpt/json.h"

namespace ds::generate {
namespace {

std::string TestData(const std::string& file) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root ? root : ".") + "/ds_runtime/runtime/generate/testdata/" + file;
}

ckpt::Json Golden(const std::string& file) {
  std::ifstream in(TestData(file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = ckpt::ParseJson(ss.str());
  REQUIRE(doc.ok());
  return *doc;
}

void CheckCases(const Tokenizer& t, const ckpt::Json& golden) {
  CHECK(t.vocab_size() == golden.Find("vocab_size")->as_int());
  int cases = 0;
  for (const ckpt::Json& c : golden.Find("cases")->items()) {
    INFO("text: \"" << c.Find("text")->as_string() << "\"");
    std::vector<int32_t> want;
    for (const ckpt::Json& v : c.Find("ids")->items())
      want.push_back(static_cast<int32_t>(v.as_int()));
    auto ids = t.Encode(c.Find("text")->as_string());
    REQUIRE(ids.ok());
    CHECK(*ids == want);
    auto text = t.Decode(*ids);
    REQUIRE(text.ok());
    CHECK(*text == c.Find("decoded")->as_string());
    ++cases;
  }
  CHECK(cases == 10);
}

TEST_CASE("tokenizer: SentencePiece ids and text equal the sentencepiece package's",
          "[generate][tokenizer]") {
  auto t = LoadTokenizer(TestData("sp.model"));
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  CheckCases(**t, Golden("sp_golden.json"));
  CHECK_FALSE((*t)->Decode({-1}).ok());
}

TEST_CASE("tokenizer: a tokenizer.json loads as byte-level BPE; other files are refused",
          "[generate][tokenizer]") {
  auto bpe = LoadTokenizer(TestData("tokenizer.json"));
  REQUIRE(bpe.ok());
  CheckCases(**bpe, Golden("tokenizer_golden.json"));
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
