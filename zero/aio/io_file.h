// A file opened for the I/O engine: with O_DIRECT where the filesystem takes it, else
// buffered, with one warning per process (tmpfs before 6.x, some network and FUSE filesystems
// refuse O_DIRECT with EINVAL).
//
//   DS_ASSIGN_OR_RETURN(IoFile f, IoFile::Open(path, IoFile::kCreate));
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace ds::zero {

class IoFile {
 public:
  enum Mode { kRead, kCreate, kReadWrite };  // kCreate truncates or creates (0600)

  // `try_direct` false opens buffered at once (tests of the fallback). Errors name the path
  // and errno's text.
  static StatusOr<IoFile> Open(const std::string& path, Mode mode, bool try_direct = true);
  IoFile() = default;
  IoFile(IoFile&& o) noexcept;
  IoFile& operator=(IoFile&& o) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;
  ~IoFile();

  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  // Sets the file's length (writes pad to whole kIoAlign units; this trims them).
  Status Truncate(int64_t bytes) const;
  StatusOr<int64_t> Size() const;
  // Reserves the file's blocks up to `bytes` (fallocate), so writes overwrite laid-out extents
  // as swap files do after their first step. ResourceExhausted naming the path when the
  // filesystem lacks the space.
  Status Preallocate(int64_t bytes) const;
  Status Sync() const;  // fdatasync

 private:
  int fd_ = -1;
  bool direct_ = false;
  std::string path_;
};

}  // namespace ds::zero
