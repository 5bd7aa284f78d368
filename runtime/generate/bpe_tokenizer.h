// BpeTokenizer: a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2's family): text
// to ids and back, as the tokenizers package computes them.
//   1. added tokens (tokenizer.json's added_tokens: "<|endoftext|>" ...) are cut out of the text
//      first, longest match first, and become their ids;
//   2. the ByteLevel pre-tokenizer splits the rest with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      or, for Llama-3's Sequence [Split, ByteLevel], with Llama-3's (kLlama3Pattern: digits in
//      threes, case-insensitive contractions), with Unicode classes from ICU, optionally after
//      a leading space (add_prefix_space), and maps each piece's UTF-8 bytes to GPT-2's
//      printable characters (bytes_to_unicode);
//   3. BPE merges each piece's symbols by the merges' ranks, lowest first (ignore_merges: a
//      piece in the vocabulary is one token).
// Decoding maps the tokens' characters back to bytes (added tokens as their text). Special
// tokens a template would add (post_processor) are not added: Encode is the tokenizers
// package's encode(text, add_special_tokens=False). Anything else in the file (a normalizer,
// another pre-tokenizer or model, byte fallback, subword prefixes) is refused naming the key.
//
//   DS_ASSIGN_OR_RETURN(BpeTokenizer t, BpeTokenizer::Load("gpt2/tokenizer.json"));
//   DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, t.Encode("Hello world"));
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"

namespace ds {
class Json;
}

namespace ds::generate {

// Llama-3's pre-tokenizer pattern, as its tokenizer.json spells it.
inline constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

class BpeTokenizer {
 public:
  static StatusOr<BpeTokenizer> Load(const std::string& path);
  // `text` is a tokenizer.json's contents; `where` names it in errors.
  static StatusOr<BpeTokenizer> FromJson(const std::string& text, const std::string& where);

  // InvalidArgument when a piece's symbol is not in the vocabulary (a vocabulary without every
  // byte).
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // The text's bytes (UTF-8 when the ids came from text); InvalidArgument for an id outside the
  // vocabulary.
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  // The id of a token's string (its byte-level spelling, or an added token's text); -1 if none.
  int32_t TokenId(std::string_view token) const;

 private:
  Status EncodePiece(std::string_view bytes, std::vector<int32_t>* ids) const;
  Status ReadModel(const Json* model, const std::string& where);
  Status ReadPreTokenizer(const Json* pre, const std::string& where);
  Status ReadAddedTokens(const Json* added, const std::string& where);

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int32_t> ranks_;      // "left right" -> merge rank
  std::vector<std::pair<std::string, int32_t>> added_;  // longest first
  std::map<int32_t, std::string> added_text_;
  std::string byte_char_[256];                       // byte -> its character, UTF-8
  std::unordered_map<uint32_t, uint8_t> char_byte_;  // code point -> byte
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  bool llama3_ = false;  // Llama-3's Split pattern instead of GPT-2's
};

}  // namespace ds::generate
