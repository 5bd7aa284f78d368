#include "runtime/data/byte_tokenizer.h"

namespace ds::data {

std::vector<uint32_t> ByteEncode(std::string_view text) {
  std::vector<uint32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

StatusOr<std::string> ByteDecode(const int32_t* tokens, size_t count) {
  std::string text(count, '\0');
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= kByteVocabSize) {
      return InvalidArgumentError("token " + std::to_string(tokens[i]) + " at " +
                                  std::to_string(i) + " is not a byte (vocab 256)");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

}  // namespace ds::data
