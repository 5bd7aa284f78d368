// The byte-level BPE tokenizers' pre-tokenizers (bpe_tokenizer.h): UTF-8 text as code points, and
// its split into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// or Llama-3's
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// written out as scanners (leftmost alternative first, as the regex engines take them), with
// Unicode's letter, number and white-space classes from ICU.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ds::generate {

// One code point of UTF-8 text: its value and bytes (an invalid byte stands alone, as U+FFFD).
struct CodePoint {
  uint32_t c;
  size_t begin, size;
};
std::vector<CodePoint> DecodeUtf8(std::string_view s);

// The byte ranges [begin, end) of the pieces of text `bytes` long whose code points are `cp`.
std::vector<std::pair<size_t, size_t>> SplitGpt2(const std::vector<CodePoint>& cp, size_t bytes);
std::vector<std::pair<size_t, size_t>> SplitLlama3(const std::vector<CodePoint>& cp, size_t bytes);

}  // namespace ds::generate
