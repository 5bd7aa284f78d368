#include "runtime/ckpt/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

namespace ds::ckpt {

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::unique_ptr<FileWriter>> FileWriter::Create(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  return std::unique_ptr<FileWriter>(new FileWriter(path, fd));
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileWriter::Append(const void* data, size_t n) {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": write after close");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; chunk explicitly to keep short writes rare.
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write(" + path_ + ")");
    }
    p += w;
    n -= static_cast<size_t>(w);
    bytes_ += static_cast<uint64_t>(w);
  }
  return OkStatus();
}

Status FileWriter::SyncAndClose() {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": already closed");
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "fsync(" + path_ + ")");
  }
  if (::close(fd) != 0) return ErrnoToStatus(errno, "close(" + path_ + ")");
  return OkStatus();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  std::string tmp = path + ".tmp";
  StatusOr<std::unique_ptr<FileWriter>> w = FileWriter::Create(tmp);
  if (!w.ok()) return w.status();
  Status s = (*w)->Append(contents.data(), contents.size());
  if (s.ok()) s = (*w)->SyncAndClose();
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoToStatus(errno, "rename(" + tmp + ", " + path + ")");
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(DirName(path));
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "read(" + path + ")");
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + dir + ")");
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; the data files were synced already.
  if (rc != 0 && err != EINVAL && err != EROFS) return ErrnoToStatus(err, "fsync(" + dir + ")");
  return OkStatus();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoToStatus(ec.value(), "remove_all(" + path + ")");
  return OkStatus();
}

Status CreateDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create_directories(" + path + ")");
  if (!IsDirectory(path)) return FailedPreconditionError(path + ": exists and is not a directory");
  return OkStatus();
}

StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, "opendir(" + dir + ")");
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "fstat(" + path + ")");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "mmap(" + path + ")");
    }
    f.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps the file alive.
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void DropResidentPages(const void* addr, size_t len) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(addr) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + len) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void ReadAhead(const void* addr, size_t len) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

SpanPrefetcher::SpanPrefetcher(std::vector<std::pair<const void*, size_t>> spans)
    : thread_([this, spans = std::move(spans)] {
        constexpr size_t kChunk = size_t{16} << 20;
        for (const auto& [addr, len] : spans)
          for (size_t at = 0; at < len; at += kChunk) {
            if (stop_.load(std::memory_order_relaxed)) return;
            ReadAhead(static_cast<const char*>(addr) + at, std::min(kChunk, len - at));
          }
      }) {}

SpanPrefetcher::~SpanPrefetcher() {
  stop_ = true;
  thread_.join();
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace ds::ckpt
