#include "runtime/data/addition_task.h"

#include <exception>
#include <random>
#include <unordered_set>

#include <yaml-cpp/yaml.h>

#include "runtime/base/check.h"
#include "runtime/data/random.h"

namespace ds::data {
namespace {

// Appends `value` as exactly `width` digits, most significant first.
void AppendDigits(uint64_t value, int width, std::vector<int32_t>* out) {
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(width));
  for (int i = width - 1; i >= 0; --i) {
    (*out)[start + static_cast<size_t>(i)] = static_cast<int32_t>(value % 10);
    value /= 10;
  }
}

// Keys a * 10^D + b of `count` distinct pairs out of `total`, in random order.
std::vector<uint64_t> SampleDistinct(uint64_t total, uint64_t count, std::mt19937_64& rng) {
  std::vector<uint64_t> keys;
  keys.reserve(count);
  if (total <= (uint64_t{1} << 22) && count * 4 >= total) {
    // Dense: partial Fisher-Yates over all pairs.
    std::vector<uint64_t> all(total);
    for (uint64_t i = 0; i < total; ++i) all[i] = i;
    for (uint64_t i = 0; i < count; ++i) {
      std::swap(all[i], all[i + UniformBelow(rng, total - i)]);
      keys.push_back(all[i]);
    }
    return keys;
  }
  // Sparse: rejection; at most 1/4 of the pairs are taken here when total is small.
  std::unordered_set<uint64_t> seen;
  seen.reserve(count * 2);
  while (keys.size() < count) {
    const uint64_t key = UniformBelow(rng, total);
    if (seen.insert(key).second) keys.push_back(key);
  }
  return keys;
}

}  // namespace

uint64_t AdditionTask::max_operand() const {
  uint64_t p = 1;
  for (int i = 0; i < digits; ++i) p *= 10;
  return p - 1;
}

std::vector<int32_t> EncodeAdditionPrompt(const AdditionTask& task, uint64_t a, uint64_t b) {
  DS_CHECK(a <= task.max_operand() && b <= task.max_operand(), "{}+{} exceeds {} digits", a, b,
           task.digits);
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<size_t>(task.example_length()));
  AppendDigits(a, task.digits, &tokens);
  tokens.push_back(kAdditionPlus);
  AppendDigits(b, task.digits, &tokens);
  tokens.push_back(kAdditionEquals);
  return tokens;
}

std::vector<int32_t> EncodeAdditionExample(const AdditionTask& task, uint64_t a, uint64_t b) {
  std::vector<int32_t> tokens = EncodeAdditionPrompt(task, a, b);
  uint64_t sum = a + b;
  for (int i = 0; i < task.answer_length(); ++i) {  // least significant digit first
    tokens.push_back(static_cast<int32_t>(sum % 10));
    sum /= 10;
  }
  tokens.push_back(kAdditionEnd);
  return tokens;
}

StatusOr<uint64_t> DecodeAdditionAnswer(const AdditionTask& task, const int32_t* tokens,
                                        size_t count) {
  uint64_t value = 0;
  uint64_t place = 1;
  int digits = 0;
  for (size_t i = 0; i < count && digits < task.answer_length(); ++i) {
    if (tokens[i] == kAdditionEnd) break;
    if (tokens[i] < 0 || tokens[i] > 9) {
      return InvalidArgumentError("answer token " + std::to_string(i) + " is " +
                                  AdditionTokensToString(&tokens[i], 1) + ", not a digit");
    }
    value += static_cast<uint64_t>(tokens[i]) * place;
    place *= 10;
    ++digits;
  }
  if (digits == 0) return InvalidArgumentError("answer has no digits");
  return value;
}

std::string AdditionTokensToString(const int32_t* tokens, size_t count) {
  std::string s(count, '?');
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] >= 0 && tokens[i] < kAdditionVocabSize) s[i] = kAdditionChars[tokens[i]];
  }
  return s;
}

StatusOr<std::vector<int32_t>> AdditionStringToTokens(std::string_view text) {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  const std::string_view chars(kAdditionChars);
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t id = chars.find(text[i]);
    if (id == std::string_view::npos) {
      return InvalidArgumentError("character '" + std::string(1, text[i]) + "' at " +
                                  std::to_string(i) + " is not in the addition vocabulary \"" +
                                  std::string(chars) + "\"");
    }
    tokens.push_back(static_cast<int32_t>(id));
  }
  return tokens;
}

StatusOr<AdditionSplit> GenerateAdditionProblems(const AdditionTask& task, int64_t train_count,
                                                 int64_t validation_count, uint64_t seed) {
  if (task.digits < 1 || task.digits > kAdditionMaxDigits) {
    return InvalidArgumentError("digits must be in 1.." + std::to_string(kAdditionMaxDigits) +
                                ", got " + std::to_string(task.digits));
  }
  if (train_count < 0 || validation_count < 0) {
    return InvalidArgumentError("example counts must be >= 0");
  }
  const uint64_t side = task.max_operand() + 1;
  const uint64_t total = side * side;
  const uint64_t need =
      static_cast<uint64_t>(train_count) + static_cast<uint64_t>(validation_count);
  if (need > total) {
    return InvalidArgumentError(std::to_string(need) + " distinct problems requested but " +
                                std::to_string(task.digits) + "-digit addition has only " +
                                std::to_string(total));
  }
  std::mt19937_64 rng(MixSeed(seed));
  const std::vector<uint64_t> keys = SampleDistinct(total, need, rng);
  AdditionSplit split;
  split.validation.reserve(static_cast<size_t>(validation_count));
  split.train.reserve(static_cast<size_t>(train_count));
  for (size_t i = 0; i < keys.size(); ++i) {
    const AdditionProblem p{keys[i] / side, keys[i] % side};
    if (i < static_cast<size_t>(validation_count)) {
      split.validation.push_back(p);
    } else {
      split.train.push_back(p);
    }
  }
  return split;
}

std::string AdditionTaskJson(const AdditionTask& task, int64_t train_count,
                             int64_t validation_count, uint64_t seed) {
  auto field = [](const char* key, const std::string& value) {
    return std::string("  \"") + key + "\": " + value;
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  std::string json = "{\n";
  json += field("task", "\"addition\"") + ",\n";
  json += field("digits", num(task.digits)) + ",\n";
  json += field("vocab_size", num(kAdditionVocabSize)) + ",\n";
  json += field("tokens", std::string("\"") + kAdditionChars + "\"") + ",\n";
  json += field("example_length", num(task.example_length())) + ",\n";
  json += field("prompt_length", num(task.prompt_length())) + ",\n";
  json += field("answer_length", num(task.answer_length())) + ",\n";
  json += field("answer_reversed", "true") + ",\n";
  json += field("equals_position", num(task.equals_position())) + ",\n";
  json += field("plus_token", num(kAdditionPlus)) + ",\n";
  json += field("equals_token", num(kAdditionEquals)) + ",\n";
  json += field("end_token", num(kAdditionEnd)) + ",\n";
  json += field("pad_token", num(kAdditionPad)) + ",\n";
  json += field("train_examples", num(train_count)) + ",\n";
  json += field("val_examples", num(validation_count)) + ",\n";
  json += field("seed", std::to_string(seed)) + "\n";
  return json + "}\n";
}

StatusOr<AdditionTask> ParseAdditionTaskJson(const std::string& json) {
  try {
    const YAML::Node n = YAML::Load(json);
    AdditionTask task;
    int vocab = 0;
    int example_length = 0;
    if (!n.IsMap() || !YAML::convert<int>::decode(n["digits"], task.digits) ||
        !YAML::convert<int>::decode(n["vocab_size"], vocab) ||
        !YAML::convert<int>::decode(n["example_length"], example_length)) {
      return InvalidArgumentError("task.json: needs integer digits, vocab_size, example_length");
    }
    if (task.digits < 1 || task.digits > kAdditionMaxDigits || vocab != kAdditionVocabSize ||
        example_length != task.example_length()) {
      return InvalidArgumentError("task.json: digits " + std::to_string(task.digits) +
                                  ", vocab_size " + std::to_string(vocab) + ", example_length " +
                                  std::to_string(example_length) +
                                  " do not describe this build's addition task");
    }
    return task;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("task.json: ") + e.what());
  }
}

}  // namespace ds::data
