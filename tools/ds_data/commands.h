// The subcommands of ds-data, as functions (main.cc only parses flags and calls these).
//
//   ds::tools::AdditionOptions o;
//   o.output_dir = "data/addition";
//   DS_RETURN_IF_ERROR(ds::tools::RunAddition(o));
//
// Every output file is written to a temporary name and renamed, so an interrupted run leaves
// no half-written file behind.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::tools {

struct TokenizeOptions {
  std::string input;          // any file; every byte becomes one token
  std::string output;         // DSTOKENS, uint16, vocab 256
  double val_fraction = 0.0;  // the last fraction of the tokens goes to val_output
  std::string val_output;     // required when val_fraction > 0
};

// Byte-level tokenization of `input` into `output` (and `val_output`). InvalidArgument for
// bad options or an empty input; I/O errors name the file.
Status RunTokenize(const TokenizeOptions& options);

struct AdditionOptions {
  int digits = 3;
  int64_t train_examples = 50000;
  int64_t val_examples = 2000;
  uint64_t seed = 1;
  std::string output_dir;  // created if missing
};

// Writes output_dir/{train.tok, val.tok, val_problems.txt, task.json} for the addition task
// (runtime/data/addition_task.h). InvalidArgument for bad options.
Status RunAddition(const AdditionOptions& options);

// One line describing a token file: format, dtype, token count, vocab, first tokens.
StatusOr<std::string> DescribeTokenFile(const std::string& path);

// Writes `text` to `path` via `path`.tmp and rename.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace ds::tools
