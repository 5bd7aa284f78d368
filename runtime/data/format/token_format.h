// The token-file formats, shared by the job config (data.format) and the readers.
#pragma once

namespace ds::data {

// How to read a token file. kAuto looks at the first bytes: "DSTOKENS" -> kDs, the int32
// 20240520 -> kLlmc, anything else -> kUint16 (headerless). See runtime/data/README.md.
enum class TokenFileFormat { kAuto, kDs, kUint16, kLlmc };

// "auto", "ds", "uint16", "llmc" (the spellings of data.format).
inline const char* TokenFileFormatName(TokenFileFormat format) {
  switch (format) {
    case TokenFileFormat::kAuto:
      return "auto";
    case TokenFileFormat::kDs:
      return "ds";
    case TokenFileFormat::kUint16:
      return "uint16";
    case TokenFileFormat::kLlmc:
      return "llmc";
  }
  return "?";
}

}  // namespace ds::data
