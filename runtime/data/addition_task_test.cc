#include "runtime/data/addition_task.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace ds::data {
namespace {

std::string Str(const std::vector<int32_t>& t) {
  return AdditionTokensToString(t.data(), t.size());
}

TEST_CASE("AdditionTask: fixed-length examples with reversed answers", "[data]") {
  const AdditionTask task{3};
  CHECK(task.example_length() == 13);
  CHECK(task.prompt_length() == 8);
  CHECK(task.answer_length() == 4);
  CHECK(task.equals_position() == 7);
  CHECK(Str(EncodeAdditionPrompt(task, 123, 456)) == "123+456=");
  CHECK(Str(EncodeAdditionExample(task, 123, 456)) == "123+456=9750$");
  CHECK(Str(EncodeAdditionExample(task, 999, 999)) == "999+999=8991$");
  CHECK(Str(EncodeAdditionExample(task, 7, 5)) == "007+005=2100$");
  const std::vector<int32_t> e = EncodeAdditionExample(task, 7, 5);
  CHECK(e.size() == 13);
  CHECK(e[7] == kAdditionEquals);
  CHECK(e[12] == kAdditionEnd);
  CHECK(Str({kAdditionPad, 99}) == "_?");
}

TEST_CASE("AdditionTask: decode answers and strings", "[data]") {
  const AdditionTask task{3};
  const std::vector<int32_t> answer = {9, 7, 5, 0, kAdditionEnd};
  CHECK(DecodeAdditionAnswer(task, answer.data(), answer.size()).value() == 579);
  const std::vector<int32_t> short_answer = {2, 1, kAdditionEnd, 5};
  CHECK(DecodeAdditionAnswer(task, short_answer.data(), short_answer.size()).value() == 12);
  const std::vector<int32_t> long_answer = {1, 2, 3, 4, 5, 6};  // stops after D+1 digits
  CHECK(DecodeAdditionAnswer(task, long_answer.data(), long_answer.size()).value() == 4321);
  const std::vector<int32_t> bad = {1, kAdditionPlus, 3};
  CHECK(DecodeAdditionAnswer(task, bad.data(), bad.size()).status().message() ==
        "answer token 1 is +, not a digit");
  const std::vector<int32_t> empty = {kAdditionEnd};
  CHECK_FALSE(DecodeAdditionAnswer(task, empty.data(), empty.size()).ok());

  StatusOr<std::vector<int32_t>> tokens = AdditionStringToTokens("123+456=9750$_");
  REQUIRE(tokens.ok());
  CHECK(Str(*tokens) == "123+456=9750$_");
  CHECK((*tokens)[3] == kAdditionPlus);
  CHECK_FALSE(AdditionStringToTokens("12a").ok());
}

std::set<std::pair<uint64_t, uint64_t>> Pairs(const std::vector<AdditionProblem>& ps) {
  std::set<std::pair<uint64_t, uint64_t>> s;
  for (const AdditionProblem& p : ps) s.insert({p.a, p.b});
  return s;
}

TEST_CASE("AdditionTask: problems are distinct, disjoint and seeded", "[data]") {
  for (int digits : {1, 2, 3, 6}) {
    INFO("digits " << digits);
    const AdditionTask task{digits};
    const int64_t train = digits == 1 ? 80 : 3000;
    const int64_t val = digits == 1 ? 20 : 500;  // digits 1: every one of the 100 pairs
    StatusOr<AdditionSplit> split = GenerateAdditionProblems(task, train, val, 1);
    REQUIRE(split.ok());
    REQUIRE(split->train.size() == static_cast<size_t>(train));
    REQUIRE(split->validation.size() == static_cast<size_t>(val));
    const auto train_pairs = Pairs(split->train);
    const auto val_pairs = Pairs(split->validation);
    CHECK(train_pairs.size() == static_cast<size_t>(train));
    CHECK(val_pairs.size() == static_cast<size_t>(val));
    for (const auto& p : val_pairs) CHECK(train_pairs.count(p) == 0);
    for (const AdditionProblem& p : split->train) {
      CHECK(p.a <= task.max_operand());
      CHECK(p.b <= task.max_operand());
    }
    StatusOr<AdditionSplit> again = GenerateAdditionProblems(task, train, val, 1);
    CHECK(again->train == split->train);
    CHECK(again->validation == split->validation);
    StatusOr<AdditionSplit> other = GenerateAdditionProblems(task, train, val, 2);
    CHECK(other->validation != split->validation);
  }
  CHECK(GenerateAdditionProblems(AdditionTask{1}, 90, 11, 1).status().message() ==
        "101 distinct problems requested but 1-digit addition has only 100");
  CHECK_FALSE(GenerateAdditionProblems(AdditionTask{0}, 1, 1, 1).ok());
  CHECK_FALSE(GenerateAdditionProblems(AdditionTask{10}, 1, 1, 1).ok());
}

TEST_CASE("AdditionTask: task.json round trip", "[data]") {
  const std::string json = AdditionTaskJson(AdditionTask{4}, 100, 10, 5);
  CHECK(json.find("\"vocab_size\": 14") != std::string::npos);
  CHECK(json.find("\"example_length\": 16") != std::string::npos);
  CHECK(json.find("\"equals_token\": 11") != std::string::npos);
  CHECK(json.find("\"end_token\": 12") != std::string::npos);
  StatusOr<AdditionTask> task = ParseAdditionTaskJson(json);
  REQUIRE(task.ok());
  CHECK(task->digits == 4);
  CHECK_FALSE(ParseAdditionTaskJson("{\"digits\": 4, \"vocab_size\": 14}").ok());
  CHECK_FALSE(ParseAdditionTaskJson("{\"digits\": 4, \"vocab_size\": 15, "
                                    "\"example_length\": 16}")
                  .ok());
  CHECK_FALSE(ParseAdditionTaskJson("not json {").ok());
}

}  // namespace
}  // namespace ds::data
