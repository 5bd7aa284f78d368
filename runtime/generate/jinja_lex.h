// The chat template renderer's lexer (jinja.h): the template's segments, and the tokens inside
// one tag. Internal to runtime/generate.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::generate::jinja {

struct Segment {
  enum class Kind : uint8_t { kText, kExpr, kStmt };
  Kind kind;
  std::string text;  // the text, or the tag's inside without its delimiters and - / +
  int line;
};

// The template cut at its tags, with trim_blocks, lstrip_blocks and - / + applied; comments
// dropped. InvalidArgument for a tag that is not closed.
StatusOr<std::vector<Segment>> Segments(const std::string& text, const std::string& source);

struct Token {
  enum class Kind : uint8_t { kName, kInt, kFloat, kString, kOp };
  Kind kind;
  std::string text;  // a string's value with its escapes resolved
};

StatusOr<std::vector<Token>> Tokenize(const std::string& inside, int line,
                                      const std::string& where);

}  // namespace ds::generate::jinja
