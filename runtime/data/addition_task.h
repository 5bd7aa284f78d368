// The synthetic addition task: a tiny GPT learns D-digit addition, "123+456=" -> "9750$".
//
// Vocabulary (14 tokens): ids 0-9 are the digits, 10 '+', 11 '=', 12 end of example ('$'),
// 13 padding ('_'). An example is fixed length 3D+4:
//   a (D digits, zero-padded)  '+'  b (D digits)  '='  a+b (D+1 digits, REVERSED)  '$'
// e.g. D=3, 123+456=579 -> "123+456=9750$". Least significant digit first is how the model
// would compute it by hand (each digit depends on the carry from the previous one), which
// makes the task learnable by a tiny model. '=' is always at position 2D+1.
//
//   AdditionTask task{3};
//   std::vector<int32_t> prompt = EncodeAdditionPrompt(task, 123, 456);   // "123+456="
//   ... generate task.answer_length() tokens after it ...
//   StatusOr<uint64_t> sum = DecodeAdditionAnswer(task, generated.data(), generated.size());
//
// ds-data addition writes train.tok / val.tok (examples back to back), val_problems.txt and
// task.json (AdditionTaskJson) with these numbers. All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace ds::data {

inline constexpr int32_t kAdditionPlus = 10;
inline constexpr int32_t kAdditionEquals = 11;
inline constexpr int32_t kAdditionEnd = 12;
inline constexpr int32_t kAdditionPad = 13;
inline constexpr int32_t kAdditionVocabSize = 14;
// Token id -> character: "0123456789+=$_".
inline constexpr char kAdditionChars[] = "0123456789+=$_";
inline constexpr int kAdditionMaxDigits = 9;  // sums stay below 2^63 and a*10^D+b fits

struct AdditionTask {
  int digits = 3;  // D: digits per operand, 1..kAdditionMaxDigits

  int prompt_length() const { return 2 * digits + 2; }  // "a+b="
  int answer_length() const { return digits + 1; }      // sum digits, without the end marker
  int example_length() const { return 3 * digits + 4; }
  int equals_position() const { return 2 * digits + 1; }
  uint64_t max_operand() const;  // 10^D - 1
};

struct AdditionProblem {
  uint64_t a = 0;
  uint64_t b = 0;
  bool operator==(const AdditionProblem& o) const { return a == o.a && b == o.b; }
};

// "123+456=" (operands zero-padded to D digits). Operands must be <= max_operand().
std::vector<int32_t> EncodeAdditionPrompt(const AdditionTask& task, uint64_t a, uint64_t b);
// Prompt, reversed sum, end marker: example_length() tokens.
std::vector<int32_t> EncodeAdditionExample(const AdditionTask& task, uint64_t a, uint64_t b);

// Reads the answer a model produced after '=': reversed digits until the end marker or
// answer_length() digits. InvalidArgument on a non-digit before that or on no digits.
StatusOr<uint64_t> DecodeAdditionAnswer(const AdditionTask& task, const int32_t* tokens,
                                        size_t count);

// "123+456=9750$" from tokens ('?' for ids outside the vocabulary), and back.
std::string AdditionTokensToString(const int32_t* tokens, size_t count);
StatusOr<std::vector<int32_t>> AdditionStringToTokens(std::string_view text);

// train + validation problems, all distinct (no ordered pair (a, b) twice, so none in both),
// drawn uniformly from the 10^2D pairs; the same seed gives the same problems everywhere.
// InvalidArgument for digits outside 1..9 or more problems than pairs.
struct AdditionSplit {
  std::vector<AdditionProblem> train;
  std::vector<AdditionProblem> validation;
};
StatusOr<AdditionSplit> GenerateAdditionProblems(const AdditionTask& task, int64_t train_count,
                                                 int64_t validation_count, uint64_t seed);

// task.json: vocab, lengths, token ids of '+', '=', end and padding, counts and seed.
std::string AdditionTaskJson(const AdditionTask& task, int64_t train_count,
                             int64_t validation_count, uint64_t seed);
// Reads the digits back from task.json (the rest follows from them); checks vocab_size and
// example_length agree. InvalidArgument otherwise.
StatusOr<AdditionTask> ParseAdditionTaskJson(const std::string& json);

}  // namespace ds::data
