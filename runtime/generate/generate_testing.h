// Test helpers of runtime/generate: the golden files in testdata/ (tools/hf_generate_golden.py,
// tools/hf_tokenizer_golden.py) and the check every tokenizer golden file takes.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/base/json.h"

namespace ds::generate::testing {

inline std::string TestData(const std::string& file) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root ? root : ".") + "/ds_runtime/runtime/generate/testdata/" + file;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline Json Golden(const std::string& file) {
  auto doc = ParseJson(ReadText(TestData(file)));
  REQUIRE(doc.ok());
  return *doc;
}

inline std::vector<int32_t> Ints(const Json& a) {
  std::vector<int32_t> out;
  for (const Json& v : a.items()) out.push_back(static_cast<int32_t>(v.as_int()));
  return out;
}

// A tokenizer (anything with Encode, Decode, vocab_size) against a golden file of the packages'
// ids and decoded text: its vocabulary size, every case, and `cases` of them.
template <typename Tok>
void CheckTokenizerGolden(const Tok& t, const std::string& file, int cases) {
  const Json golden = Golden(file);
  CHECK(t.vocab_size() == golden.Find("vocab_size")->as_int());
  int seen = 0;
  for (const Json& c : golden.Find("cases")->items()) {
    INFO(file << ": \"" << c.Find("text")->as_string() << "\"");
    auto ids = t.Encode(c.Find("text")->as_string());
    REQUIRE(ids.ok());
    CHECK(*ids == Ints(*c.Find("ids")));
    auto text = t.Decode(*ids);
    REQUIRE(text.ok());
    CHECK(*text == c.Find("decoded")->as_string());
    ++seen;
  }
  CHECK(seen == cases);
}

}  // namespace ds::generate::testing
