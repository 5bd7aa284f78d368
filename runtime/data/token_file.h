// Token files: our DSTOKENS format (README.md here), raw uint16 files (nanoGPT's train.bin)
// and llm.c's .bin shards, read through a read-only memory map.
//
//   DS_RETURN_IF_ERROR(WriteTokenFile("train.tok", tokens, TokenDType::kUint16, 256));
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> f, TokenFile::Open("train.tok"));
//   f->Copy(0, 1024, buffer);   // tokens 0..1023 as int32
//
// A TokenFile is immutable after Open and safe to read from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/data/format/token_format.h"

namespace ds::data {

// Bytes per stored token; the numbers are the ones in the DSTOKENS header.
enum class TokenDType : uint32_t { kUint16 = 2, kUint32 = 4 };

inline constexpr char kTokenFileMagic[8] = {'D', 'S', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 32;
// llm.c (dev/data/data_common.py): 256 int32 header, magic, version 1 = uint16 tokens, count.
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

class TokenFile {
 public:
  // Maps `path`. Errors name the file: NotFound (missing), DataLoss (truncated header, bad
  // magic/version/dtype, token count disagreeing with the file size), InvalidArgument.
  static StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path,
                                                   TokenFileFormat format = TokenFileFormat::kAuto);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  TokenFileFormat format() const { return format_; }  // never kAuto
  TokenDType dtype() const { return dtype_; }
  int64_t size() const { return count_; }              // tokens
  uint64_t vocab_size() const { return vocab_size_; }  // DSTOKENS header; 0 = unknown

  uint32_t operator[](int64_t i) const;
  // Copies tokens [begin, begin + count) into out as int32. The range must lie in the file.
  void Copy(int64_t begin, int64_t count, int32_t* out) const;

 private:
  TokenFile() = default;
  Status Map(int fd, int64_t file_bytes);
  Status ParseHeader(TokenFileFormat format);
  // ParseHeader's formats; errors start with `p` ("path: ").
  // DSTOKENS: magic, version, dtype, vocabulary size, a count matching the file size.
  Status ParseDsHeader(const std::string& p);
  // llm.c's 1024-byte header: magic, version 1 (uint16 tokens), a count matching the file size.
  Status ParseLlmcHeader(const std::string& p);
  // Raw uint16 tokens, no header.
  Status ParseRawUint16(const std::string& p);

  std::string path_;
  TokenFileFormat format_ = TokenFileFormat::kUint16;
  TokenDType dtype_ = TokenDType::kUint16;
  int64_t count_ = 0;
  uint64_t vocab_size_ = 0;
  void* map_ = nullptr;  // owned mapping of the whole file; null for an empty file
  int64_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;  // into map_, past the header
};

// Writes a DSTOKENS file: to `path`.tmp first, then renamed over `path`, so readers never see
// half a file. InvalidArgument when a token does not fit `dtype` or is >= vocab_size (when
// vocab_size > 0); I/O errors from errno.
Status WriteTokenFile(const std::string& path, const uint32_t* tokens, int64_t count,
                      TokenDType dtype, uint64_t vocab_size);
Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenDType dtype, uint64_t vocab_size);

}  // namespace ds::data
