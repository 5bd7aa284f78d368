#include "tools/ds_data/commands.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/data/addition_task.h"
#include "runtime/data/byte_tokenizer.h"
#include "runtime/data/token_file.h"

namespace ds::tools {
namespace {

std::string Temp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> Tokens(const std::string& path) {
  StatusOr<std::unique_ptr<data::TokenFile>> f = data::TokenFile::Open(path);
  REQUIRE(f.ok());
  std::vector<int32_t> t(static_cast<size_t>((*f)->size()));
  (*f)->Copy(0, (*f)->size(), t.data());
  return t;
}

TEST_CASE("ds-data tokenize: bytes round-trip and the split is by position", "[tools]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + " \xe2\x9c\x93\n";
  const std::string input = Temp("input.txt");
  REQUIRE(WriteTextFile(input, text).ok());

  TokenizeOptions o;
  o.input = input;
  o.output = Temp("train.tok");
  o.val_fraction = 0.1;
  o.val_output = Temp("val.tok");
  REQUIRE(RunTokenize(o).ok());
  std::vector<int32_t> train = Tokens(o.output);
  const std::vector<int32_t> val = Tokens(o.val_output);
  CHECK(val.size() == static_cast<size_t>(std::llround(text.size() * 0.1)));
  train.insert(train.end(), val.begin(), val.end());
  StatusOr<std::string> back = data::ByteDecode(train.data(), train.size());
  REQUIRE(back.ok());
  CHECK(*back == text);

  TokenizeOptions whole;
  whole.input = input;
  whole.output = Temp("all.tok");
  REQUIRE(RunTokenize(whole).ok());
  CHECK(Tokens(whole.output).size() == text.size());
}

TEST_CASE("ds-data tokenize: option and input errors", "[tools]") {
  TokenizeOptions o;
  o.input = Temp("missing.txt");
  o.output = Temp("x.tok");
  CHECK(RunTokenize(o).code() == StatusCode::kNotFound);
  o.val_fraction = 0.2;
  CHECK(RunTokenize(o).message() == "tokenize: --val_fraction needs --val_output");
  o.val_fraction = 1.0;
  o.val_output = Temp("v.tok");
  CHECK(RunTokenize(o).code() == StatusCode::kInvalidArgument);
  const std::string empty = Temp("empty.txt");
  REQUIRE(WriteTextFile(empty, "").ok());
  TokenizeOptions e;
  e.input = empty;
  e.output = Temp("e.tok");
  CHECK(RunTokenize(e).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ds-data addition: files, lengths, disjointness and determinism", "[tools]") {
  AdditionOptions o;
  o.digits = 2;
  o.train_examples = 3000;
  o.val_examples = 200;
  o.seed = 5;
  o.output_dir = Temp("addition/a");
  REQUIRE(RunAddition(o).ok());
  const data::AdditionTask task{2};
  const std::string dir = o.output_dir + "/";

  const std::vector<int32_t> train = Tokens(dir + "train.tok");
  const std::vector<int32_t> val = Tokens(dir + "val.tok");
  REQUIRE(train.size() == 3000u * task.example_length());
  REQUIRE(val.size() == 200u * task.example_length());

  // Decode every training example back to (a, b) and check its answer.
  std::set<std::pair<uint64_t, uint64_t>> train_pairs;
  for (size_t e = 0; e < 3000; ++e) {
    const int32_t* ex = train.data() + e * task.example_length();
    CHECK(ex[task.equals_position()] == data::kAdditionEquals);
    CHECK(ex[task.example_length() - 1] == data::kAdditionEnd);
    const uint64_t a = ex[0] * 10 + ex[1];
    const uint64_t b = ex[3] * 10 + ex[4];
    StatusOr<uint64_t> sum =
        data::DecodeAdditionAnswer(task, ex + task.prompt_length(), task.answer_length() + 1);
    REQUIRE(sum.ok());
    CHECK(*sum == a + b);
    train_pairs.insert({a, b});
  }
  CHECK(train_pairs.size() == 3000);

  std::istringstream problems(Slurp(dir + "val_problems.txt"));
  uint64_t a, b, sum;
  size_t lines = 0;
  while (problems >> a >> b >> sum) {
    CHECK(sum == a + b);
    CHECK(train_pairs.count({a, b}) == 0);
    const std::vector<int32_t> ex = data::EncodeAdditionExample(task, a, b);
    CHECK(std::equal(ex.begin(), ex.end(), val.begin() + lines * task.example_length()));
    ++lines;
  }
  CHECK(lines == 200);

  StatusOr<data::AdditionTask> parsed = data::ParseAdditionTaskJson(Slurp(dir + "task.json"));
  REQUIRE(parsed.ok());
  CHECK(parsed->digits == 2);

  // Same seed, same bytes; another seed, other problems.
  o.output_dir = Temp("addition/b");
  REQUIRE(RunAddition(o).ok());
  CHECK(Slurp(dir + "train.tok") == Slurp(o.output_dir + "/train.tok"));
  o.seed = 6;
  o.output_dir = Temp("addition/c");
  REQUIRE(RunAddition(o).ok());
  CHECK(Slurp(dir + "val_problems.txt") != Slurp(o.output_dir + "/val_problems.txt"));

  o.digits = 1;
  o.output_dir = Temp("addition/d");
  CHECK(RunAddition(o).code() == StatusCode::kInvalidArgument);  // only 100 pairs
}

TEST_CASE("ds-data info describes a token file", "[tools]") {
  const std::string path = Temp("info.tok");
  REQUIRE(data::WriteTokenFile(path, {1, 2, 3}, data::TokenDType::kUint16, 14).ok());
  StatusOr<std::string> line = DescribeTokenFile(path);
  REQUIRE(line.ok());
  CHECK(*line == path + ": format ds, uint16, 3 tokens, vocab 14, first: 1 2 3");
}

}  // namespace
}  // namespace ds::tools
