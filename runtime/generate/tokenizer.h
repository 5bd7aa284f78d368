// Tokenizer: text to a model's token ids and back, whichever file describes it. LoadTokenizer
// picks by the file: a Hugging Face tokenizer.json (byte-level BPE, bpe_tokenizer.h) or a
// SentencePiece model (*.model, through Debian's libsentencepiece: Llama-2's family). Neither
// adds special tokens (BOS): callers that want one prepend its id.
//
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadTokenizer("dir/tokenizer.model"));
//   DS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, t->Encode("Hello"));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace ds::generate {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  virtual StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
};

// By name: "*.json" a tokenizer.json, "*.model" a SentencePiece model; InvalidArgument naming the
// file for any other, NotFound when it cannot be read, the format's own errors as they come.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// A Hugging Face directory's tokenizer: tokenizer.json, else tokenizer.model; null when it has
// neither.
StatusOr<std::unique_ptr<Tokenizer>> LoadDirTokenizer(const std::string& dir);

}  // namespace ds::generate
