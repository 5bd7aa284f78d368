#include "tools/ds_data/commands.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/addition_task.h"
#include "runtime/data/byte_tokenizer.h"
#include "runtime/data/token_file.h"

namespace ds::tools {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoToStatus(errno, "open(" + path + ")");
  std::string data;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return ErrnoToStatus(err, "read(" + path + ")");
  return data;
}

Status CheckTokenizeOptions(const TokenizeOptions& o) {
  if (o.input.empty() || o.output.empty()) {
    return InvalidArgumentError("tokenize: --input and --output are required");
  }
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    return InvalidArgumentError("tokenize: --val_fraction must be in [0, 1), got " +
                                std::to_string(o.val_fraction));
  }
  if (o.val_fraction > 0 && o.val_output.empty()) {
    return InvalidArgumentError("tokenize: --val_fraction needs --val_output");
  }
  if (o.val_fraction == 0 && !o.val_output.empty()) {
    return InvalidArgumentError("tokenize: --val_output needs --val_fraction > 0");
  }
  return OkStatus();
}

// The examples of `problems`, back to back.
std::vector<uint32_t> EncodeAll(const data::AdditionTask& task,
                                const std::vector<data::AdditionProblem>& problems) {
  std::vector<uint32_t> tokens;
  tokens.reserve(problems.size() * static_cast<size_t>(task.example_length()));
  for (const data::AdditionProblem& p : problems) {
    for (int32_t t : EncodeAdditionExample(task, p.a, p.b)) {
      tokens.push_back(static_cast<uint32_t>(t));
    }
  }
  return tokens;
}

}  // namespace

Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoToStatus(errno, "open(" + tmp + ")");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !wrote) {
    std::remove(tmp.c_str());
    return ErrnoToStatus(wrote ? errno : err, "write(" + tmp + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    return ErrnoToStatus(rename_err, "rename(" + tmp + ", " + path + ")");
  }
  return OkStatus();
}

Status RunTokenize(const TokenizeOptions& o) {
  DS_RETURN_IF_ERROR(CheckTokenizeOptions(o));
  DS_ASSIGN_OR_RETURN(std::string text, ReadFile(o.input));
  if (text.empty()) return InvalidArgumentError("tokenize: " + o.input + " is empty");
  const std::vector<uint32_t> tokens = data::ByteEncode(text);
  const int64_t n = static_cast<int64_t>(tokens.size());
  // nanoGPT's split: the first (1 - f) of the text trains, the rest validates.
  const int64_t val = static_cast<int64_t>(std::llround(static_cast<double>(n) * o.val_fraction));
  const int64_t train = n - val;
  if (o.val_fraction > 0 && (val == 0 || train == 0)) {
    return InvalidArgumentError("tokenize: " + std::to_string(n) + " tokens cannot be split " +
                                "with --val_fraction " + std::to_string(o.val_fraction));
  }
  DS_RETURN_IF_ERROR(data::WriteTokenFile(o.output, tokens.data(), train, data::TokenDType::kUint16,
                                          data::kByteVocabSize));
  if (val > 0) {
    DS_RETURN_IF_ERROR(data::WriteTokenFile(o.val_output, tokens.data() + train, val,
                                            data::TokenDType::kUint16, data::kByteVocabSize));
  }
  DS_LOG_INFO("tools", "tokenize: {} bytes -> {} train tokens in {}{}", n, train, o.output,
              val > 0 ? ", " + std::to_string(val) + " validation tokens in " + o.val_output
                      : std::string());
  return OkStatus();
}

Status RunAddition(const AdditionOptions& o) {
  if (o.output_dir.empty()) return InvalidArgumentError("addition: --output_dir is required");
  const data::AdditionTask task{o.digits};
  DS_ASSIGN_OR_RETURN(
      data::AdditionSplit split,
      data::GenerateAdditionProblems(task, o.train_examples, o.val_examples, o.seed));
  std::error_code ec;
  std::filesystem::create_directories(o.output_dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "mkdir(" + o.output_dir + ")");
  const std::string dir = o.output_dir + "/";

  DS_RETURN_IF_ERROR(data::WriteTokenFile(dir + "train.tok", EncodeAll(task, split.train),
                                          data::TokenDType::kUint16, data::kAdditionVocabSize));
  DS_RETURN_IF_ERROR(data::WriteTokenFile(dir + "val.tok", EncodeAll(task, split.validation),
                                          data::TokenDType::kUint16, data::kAdditionVocabSize));
  std::string problems;
  for (const data::AdditionProblem& p : split.validation) {
    problems +=
        std::to_string(p.a) + " " + std::to_string(p.b) + " " + std::to_string(p.a + p.b) + "\n";
  }
  DS_RETURN_IF_ERROR(WriteTextFile(dir + "val_problems.txt", problems));
  DS_RETURN_IF_ERROR(WriteTextFile(
      dir + "task.json", data::AdditionTaskJson(task, o.train_examples, o.val_examples, o.seed)));
  DS_LOG_INFO("tools",
              "addition: {}-digit, {} train + {} validation examples of {} tokens in {} "
              "(vocab {})",
              o.digits, o.train_examples, o.val_examples, task.example_length(), o.output_dir,
              data::kAdditionVocabSize);
  return OkStatus();
}

StatusOr<std::string> DescribeTokenFile(const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<data::TokenFile> f, data::TokenFile::Open(path));
  std::string line = path + ": format " + data::TokenFileFormatName(f->format()) + ", uint" +
                     std::to_string(8 * static_cast<int>(f->dtype())) + ", " +
                     std::to_string(f->size()) + " tokens, vocab " +
                     (f->vocab_size() > 0 ? std::to_string(f->vocab_size()) : "unknown") +
                     ", first:";
  for (int64_t i = 0; i < std::min<int64_t>(16, f->size()); ++i) {
    line += " " + std::to_string((*f)[i]);
  }
  return line;
}

}  // namespace ds::tools
