#include "zero/aio/io_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "runtime/base/logging.h"

namespace ds::zero {
namespace {

std::atomic<bool> g_warned{false};

Status Errno(const std::string& what, const std::string& path) {
  return InternalError(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

StatusOr<IoFile> IoFile::Open(const std::string& path, Mode mode, bool try_direct) {
  int flags = O_CLOEXEC;
  if (mode == kRead) flags |= O_RDONLY;
  if (mode == kCreate) flags |= O_RDWR | O_CREAT | O_TRUNC;
  if (mode == kReadWrite) flags |= O_RDWR;
  IoFile f;
  f.path_ = path;
  if (try_direct) {
    f.fd_ = ::open(path.c_str(), flags | O_DIRECT, 0600);
    f.direct_ = f.fd_ >= 0;
    if (f.fd_ < 0 && errno != EINVAL) return Errno("cannot open", path);
    if (f.fd_ < 0 && !g_warned.exchange(true))
      DS_LOG_WARN("aio", "{}: the filesystem refuses O_DIRECT; swapping through the page cache",
                  path);
  }
  if (f.fd_ < 0) f.fd_ = ::open(path.c_str(), flags, 0600);
  if (f.fd_ < 0) return Errno("cannot open", path);
  return f;
}

IoFile::IoFile(IoFile&& o) noexcept : fd_(o.fd_), direct_(o.direct_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

IoFile& IoFile::operator=(IoFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    direct_ = o.direct_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

IoFile::~IoFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status IoFile::Truncate(int64_t bytes) const {
  if (::ftruncate(fd_, bytes) != 0) return Errno("cannot truncate", path_);
  return OkStatus();
}

StatusOr<int64_t> IoFile::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Errno("cannot stat", path_);
  return static_cast<int64_t>(st.st_size);
}

Status IoFile::Preallocate(int64_t bytes) const {
  const int r = ::posix_fallocate(fd_, 0, bytes);
  if (r == ENOSPC)
    return ResourceExhaustedError(path_ + ": no space for " + std::to_string(bytes) + " bytes");
  if (r != 0) return InternalError("cannot allocate " + path_ + ": " + std::strerror(r));
  return OkStatus();
}

Status IoFile::Sync() const {
  if (::fdatasync(fd_) != 0) return Errno("cannot sync", path_);
  return OkStatus();
}

}  // namespace ds::zero
