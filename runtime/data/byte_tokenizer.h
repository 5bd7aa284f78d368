// Byte-level tokenizer: token = byte value (vocab 256). Lossless for any input, UTF-8 or not.
//
//   std::vector<uint32_t> tokens = ByteEncode("hello");    // {104, 101, 108, 108, 111}
//   std::string text = ByteDecode(ids.data(), ids.size());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace ds::data {

inline constexpr int kByteVocabSize = 256;

std::vector<uint32_t> ByteEncode(std::string_view text);

// InvalidArgument when a token is outside [0, 256).
StatusOr<std::string> ByteDecode(const int32_t* tokens, size_t count);

}  // namespace ds::data
