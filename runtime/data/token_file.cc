#include "runtime/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/base/check.h"
#include "runtime/base/status_macros.h"

namespace ds::data {
namespace {

// Little-endian field access, independent of the host's byte order.
uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t LoadU64(const uint8_t* p) { return uint64_t{LoadU32(p)} | uint64_t{LoadU32(p + 4)} << 32; }
void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void StoreU64(uint8_t* p, uint64_t v) {
  StoreU32(p, static_cast<uint32_t>(v));
  StoreU32(p + 4, static_cast<uint32_t>(v >> 32));
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

Status WriteAll(int fd, const uint8_t* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "write(" + path + ")");
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return OkStatus();
}

// The format of a file whose format is kAuto: DSTOKENS or llm.c by magic, else raw uint16.
TokenFileFormat DetectFormat(const uint8_t* bytes, int64_t n) {
  if (n >= 8 && std::memcmp(bytes, kTokenFileMagic, 8) == 0) return TokenFileFormat::kDs;
  if (n >= 4 && static_cast<int32_t>(LoadU32(bytes)) == kLlmcMagic) return TokenFileFormat::kLlmc;
  return TokenFileFormat::kUint16;
}

}  // namespace

StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path,
                                                     TokenFileFormat format) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, "fstat(" + path + ")");
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError(path + ": not a regular file");
  std::unique_ptr<TokenFile> file(new TokenFile());
  file->path_ = path;
  DS_RETURN_IF_ERROR(file->Map(fd, st.st_size));
  DS_RETURN_IF_ERROR(file->ParseHeader(format));
  return file;
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(map_bytes_));
}

Status TokenFile::Map(int fd, int64_t file_bytes) {
  map_bytes_ = file_bytes;
  if (file_bytes == 0) return OkStatus();  // mmap rejects length 0
  void* p = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return ErrnoToStatus(errno, "mmap(" + path_ + ")");
  map_ = p;
  return OkStatus();
}

Status TokenFile::ParseHeader(TokenFileFormat format) {
  const uint8_t* bytes = static_cast<const uint8_t*>(map_);
  const int64_t n = map_bytes_;
  if (format == TokenFileFormat::kAuto) format = DetectFormat(bytes, n);
  format_ = format;
  const std::string p = path_ + ": ";
  switch (format) {
    case TokenFileFormat::kDs:
      return ParseDsHeader(p);
    case TokenFileFormat::kLlmc:
      return ParseLlmcHeader(p);
    case TokenFileFormat::kUint16:
    case TokenFileFormat::kAuto:
      return ParseRawUint16(p);
  }
  return InternalError(p + "unknown format");
}

Status TokenFile::ParseDsHeader(const std::string& p) {
  const uint8_t* bytes = static_cast<const uint8_t*>(map_);
  const int64_t n = map_bytes_;
  if (n < kTokenFileHeaderBytes) {
    return DataLossError(p + "truncated header: " + std::to_string(n) +
                         " bytes, a DSTOKENS header has 32");
  }
  if (std::memcmp(bytes, kTokenFileMagic, 8) != 0) {
    return DataLossError(p +
                         "bad magic: not a DSTOKENS file (for raw uint16 tokens use "
                         "format uint16)");
  }
  const uint32_t version = LoadU32(bytes + 8);
  if (version != kTokenFileVersion) {
    return DataLossError(p + "unsupported DSTOKENS version " + std::to_string(version) +
                         " (this build reads version 1)");
  }
  const uint32_t dtype = LoadU32(bytes + 12);
  if (dtype != 2 && dtype != 4) {
    return DataLossError(p + "bad token dtype " + std::to_string(dtype) +
                         " (2 = uint16, 4 = uint32)");
  }
  dtype_ = static_cast<TokenDType>(dtype);
  const uint64_t count = LoadU64(bytes + 16);
  vocab_size_ = LoadU64(bytes + 24);
  const uint64_t want = static_cast<uint64_t>(kTokenFileHeaderBytes) + count * dtype;
  if (count > (uint64_t{1} << 56) || want != static_cast<uint64_t>(n)) {
    return DataLossError(p + "header says " + std::to_string(count) + " tokens (" +
                         std::to_string(want) + " bytes) but the file has " + std::to_string(n) +
                         " bytes");
  }
  count_ = static_cast<int64_t>(count);
  tokens_ = bytes + kTokenFileHeaderBytes;
  return OkStatus();
}

Status TokenFile::ParseLlmcHeader(const std::string& p) {
  const uint8_t* bytes = static_cast<const uint8_t*>(map_);
  const int64_t n = map_bytes_;
  if (n < kLlmcHeaderBytes) {
    return DataLossError(p + "truncated llm.c header: " + std::to_string(n) +
                         " bytes, the header has 1024");
  }
  const int32_t magic = static_cast<int32_t>(LoadU32(bytes));
  if (magic != kLlmcMagic) {
    return DataLossError(p + "bad llm.c magic " + std::to_string(magic) + " (expected " +
                         std::to_string(kLlmcMagic) + ")");
  }
  const int32_t version = static_cast<int32_t>(LoadU32(bytes + 4));
  if (version != 1) {
    return DataLossError(p + "unsupported llm.c version " + std::to_string(version) +
                         " (this build reads version 1, uint16 tokens)");
  }
  const int64_t count = static_cast<int32_t>(LoadU32(bytes + 8));
  if (count < 0 || kLlmcHeaderBytes + 2 * count != n) {
    return DataLossError(p + "header says " + std::to_string(count) + " tokens (" +
                         std::to_string(kLlmcHeaderBytes + 2 * count) +
                         " bytes) but the file has " + std::to_string(n) + " bytes");
  }
  dtype_ = TokenDType::kUint16;
  count_ = count;
  tokens_ = bytes + kLlmcHeaderBytes;
  return OkStatus();
}

Status TokenFile::ParseRawUint16(const std::string& p) {
  const int64_t n = map_bytes_;
  if (n % 2 != 0) {
    return DataLossError(p + std::to_string(n) + " bytes is not a whole number of uint16 tokens");
  }
  format_ = TokenFileFormat::kUint16;
  dtype_ = TokenDType::kUint16;
  count_ = n / 2;
  tokens_ = static_cast<const uint8_t*>(map_);
  return OkStatus();
}

uint32_t TokenFile::operator[](int64_t i) const {
  DS_DCHECK(i >= 0 && i < count_, "token {} of {}", i, count_);
  if (dtype_ == TokenDType::kUint16) return reinterpret_cast<const uint16_t*>(tokens_)[i];
  return reinterpret_cast<const uint32_t*>(tokens_)[i];
}

void TokenFile::Copy(int64_t begin, int64_t count, int32_t* out) const {
  DS_CHECK(begin >= 0 && count >= 0 && begin + count <= count_,
           "{}: tokens [{}, {}) outside [0, {})", path_, begin, begin + count, count_);
  // Headers are 32 or 1024 bytes and the map is page-aligned, so the casts are aligned.
  if (dtype_ == TokenDType::kUint16) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(tokens_) + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = src[i];
  } else {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(tokens_) + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(src[i]);
  }
}

Status WriteTokenFile(const std::string& path, const uint32_t* tokens, int64_t count,
                      TokenDType dtype, uint64_t vocab_size) {
  if (count < 0) return InvalidArgumentError(path + ": negative token count");
  const uint64_t limit = dtype == TokenDType::kUint16 ? 65536 : (uint64_t{1} << 31);
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] >= limit || (vocab_size > 0 && tokens[i] >= vocab_size)) {
      return InvalidArgumentError(path + ": token " + std::to_string(tokens[i]) + " at " +
                                  std::to_string(i) + " does not fit " +
                                  (tokens[i] >= limit
                                       ? std::string("the token dtype")
                                       : "vocab size " + std::to_string(vocab_size)));
    }
  }
  uint8_t header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kTokenFileMagic, 8);
  StoreU32(header + 8, kTokenFileVersion);
  StoreU32(header + 12, static_cast<uint32_t>(dtype));
  StoreU64(header + 16, static_cast<uint64_t>(count));
  StoreU64(header + 24, vocab_size);

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + tmp + ")");
  FdCloser closer(fd);
  Status s = WriteAll(fd, header, sizeof(header), tmp);
  // Encode in chunks so a large file needs no second full copy in memory.
  const size_t width = static_cast<size_t>(dtype);
  std::vector<uint8_t> chunk;
  for (int64_t begin = 0; s.ok() && begin < count; begin += 1 << 20) {
    const int64_t end = std::min<int64_t>(count, begin + (1 << 20));
    chunk.assign(static_cast<size_t>(end - begin) * width, 0);
    for (int64_t i = begin; i < end; ++i) {
      uint8_t* dst = chunk.data() + static_cast<size_t>(i - begin) * width;
      for (size_t b = 0; b < width; ++b) dst[b] = static_cast<uint8_t>(tokens[i] >> (8 * b));
    }
    s = WriteAll(fd, chunk.data(), chunk.size(), tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, "fsync(" + tmp + ")");
  if (::close(closer.Release()) != 0 && s.ok()) s = ErrnoToStatus(errno, "close(" + tmp + ")");
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoToStatus(errno, "rename(" + tmp + ", " + path + ")");
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenDType dtype, uint64_t vocab_size) {
  return WriteTokenFile(path, tokens.data(), static_cast<int64_t>(tokens.size()), dtype,
                        vocab_size);
}

}  // namespace ds::data
