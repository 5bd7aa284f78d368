#include "launcher/state_store/copy_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <tuple>

#include "runtime/base/crc32c.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

constexpr char kTrailerMagic[4] = {'D', 'S', 'C', 'E'};
constexpr std::string_view kCopySuffix = ".copy";
constexpr size_t kReadChunkBytes = size_t{4} << 20;

// Parses a non-negative decimal number that fills `text`.
template <typename T>
bool ParseNumber(std::string_view text, T* value) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
}

// Parses "r<RANK>.s<STEP>.copy"; false for anything else (parts included).
bool ParseCopyFileName(std::string_view name, int* rank, int64_t* step) {
  if (name.size() <= kCopySuffix.size() || name[0] != 'r') return false;
  if (name.substr(name.size() - kCopySuffix.size()) != kCopySuffix) return false;
  name = name.substr(1, name.size() - 1 - kCopySuffix.size());  // "<RANK>.s<STEP>"
  const size_t dot = name.find(".s");
  if (dot == std::string_view::npos) return false;
  return ParseNumber(name.substr(0, dot), rank) && ParseNumber(name.substr(dot + 2), step);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return name.find('/') != std::string::npos ? name : dir + "/" + name;
}

// Reads exactly n bytes at `offset` (retries EINTR and short reads).
Status PreadAll(int fd, char* out, size_t n, int64_t offset, const std::string& what) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, out + done, n - done, offset + static_cast<int64_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoToStatus(errno, "read(" + what + ")");
    if (got == 0) {
      return DataLossError(fmt::format("{}: ended after {} of {} bytes", what, done, n));
    }
    done += static_cast<size_t>(got);
  }
  return OkStatus();
}

// Picks the base directory of a new CopyDir: $DS_COPY_ROOT when set (tests put it in their own
// directory, so a killed agent's copies go with it), else /dev/shm when it is usable, else
// $TMPDIR or /tmp.
std::vector<std::string> BaseDirs() {
  std::vector<std::string> bases;
  if (const char* root = std::getenv("DS_COPY_ROOT"); root && *root) bases.push_back(root);
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK | X_OK) == 0) {
    bases.push_back("/dev/shm");
  }
  const char* tmp = std::getenv("TMPDIR");
  bases.push_back(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp");
  return bases;
}

}  // namespace

std::string CopyFileName(int rank, int64_t step) {
  return fmt::format("r{}.s{}{}", rank, step, kCopySuffix);
}

StatusOr<std::unique_ptr<CopyDir>> CopyDir::Create() {
  Status last = InternalError("no base directory");
  for (const std::string& base : BaseDirs()) {
    std::string templ = base + "/ds-copies.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {  // mkdtemp makes it 0700
      last = ErrnoToStatus(errno, "mkdtemp(" + templ + ")");
      DS_LOG_WARN("store", "cannot make a copy directory under {}: {}", base, last.ToString());
      continue;
    }
    return std::unique_ptr<CopyDir>(new CopyDir(std::move(templ)));
  }
  return last;
}

CopyDir::~CopyDir() {
  DIR* d = opendir(path_.c_str());
  if (d != nullptr) {
    while (const dirent* entry = readdir(d)) {
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (unlinkat(dirfd(d), entry->d_name, 0) != 0 && errno != ENOENT) {
        DS_LOG_WARN("store", "cannot remove {}/{}: {}", path_, name, std::strerror(errno));
      }
    }
    closedir(d);
  }
  if (rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    DS_LOG_WARN("store", "cannot remove the copy directory {}: {}", path_, std::strerror(errno));
  }
}

std::vector<HeldCopy> ListCopies(const std::string& dir) {
  std::vector<HeldCopy> held;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return held;
  while (const dirent* entry = readdir(d)) {
    HeldCopy copy;
    if (!ParseCopyFileName(entry->d_name, &copy.rank, &copy.step)) continue;
    struct stat st;
    if (fstatat(dirfd(d), entry->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_size < kCopyTrailerBytes) continue;
    copy.bytes = st.st_size - kCopyTrailerBytes;
    held.push_back(copy);
  }
  closedir(d);
  std::sort(held.begin(), held.end(), [](const HeldCopy& a, const HeldCopy& b) {
    return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
  });
  return held;
}

std::vector<HeldCopy> CopyDir::Held() const { return ListCopies(path_); }

void CopyDir::DropAfter(int64_t step) {
  for (const HeldCopy& copy : Held()) {
    if (copy.step <= step) continue;
    const std::string path = JoinPath(path_, CopyFileName(copy.rank, copy.step));
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      DS_LOG_WARN("store", "cannot remove {}: {}", path, std::strerror(errno));
    }
  }
}

int64_t CopyDir::bytes() const {
  int64_t total = 0;
  for (const HeldCopy& copy : Held()) total += copy.bytes;
  return total;
}

StatusOr<int> OpenPart(const std::string& dir, int rank, int64_t step, std::string* part) {
  if (rank < 0 || step < 0) {
    return InvalidArgumentError(
        fmt::format("copy of rank {} step {}: negative rank or step", rank, step));
  }
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    const std::string path = fmt::format("{}/r{}.s{}.part.{}.{}", dir, rank, step,
                                         static_cast<long>(getpid()), counter.fetch_add(1));
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      *part = path;
      return fd;
    }
    if (errno == EINTR || (errno == EEXIST && attempt < 16)) continue;  // a stale part's name
    return ErrnoToStatus(errno, "open(" + path + ")");
  }
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t wrote = write(fd, p, n);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return ErrnoToStatus(errno, "write(" + what + ")");
    p += wrote;
    n -= static_cast<size_t>(wrote);
  }
  return OkStatus();
}

Status WriteTrailer(int fd, uint32_t crc32c) {
  char trailer[kCopyTrailerBytes];
  for (int i = 0; i < 4; ++i) trailer[i] = static_cast<char>((crc32c >> (8 * i)) & 0xff);
  std::memcpy(trailer + 4, kTrailerMagic, 4);
  DS_RETURN_IF_ERROR(WriteAll(fd, trailer, sizeof(trailer), "copy part trailer"));
  // A reused file (OpenPartReusing) may be longer: the copy ends here.
  const off_t end = lseek(fd, 0, SEEK_CUR);
  if (end < 0 || ftruncate(fd, end) != 0) return ErrnoToStatus(errno, "ftruncate(copy part)");
  return OkStatus();
}

StatusOr<int> OpenPartReusing(const std::string& dir, int rank, int64_t step, int keep,
                              std::string* part) {
  std::vector<HeldCopy> mine;
  for (const HeldCopy& c : ListCopies(dir))
    if (c.rank == rank) mine.push_back(c);
  if (static_cast<int>(mine.size()) < keep || mine.empty()) return OpenPart(dir, rank, step, part);
  static std::atomic<uint64_t> counter{0};
  const std::string oldest = JoinPath(dir, CopyFileName(rank, mine.front().step));
  const std::string path = fmt::format("{}/r{}.s{}.part.{}.r{}", dir, rank, step,
                                       static_cast<long>(getpid()), counter.fetch_add(1));
  if (rename(oldest.c_str(), path.c_str()) != 0) return OpenPart(dir, rank, step, part);
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    unlink(path.c_str());
    return OpenPart(dir, rank, step, part);
  }
  *part = path;
  return fd;
}

Status CommitPart(const std::string& dir, const std::string& part, int rank, int64_t step,
                  int keep) {
  const std::string from = JoinPath(dir, part);
  if (keep < 1) {
    unlink(from.c_str());
    return InvalidArgumentError(fmt::format("CommitPart({}): keep {} < 1", from, keep));
  }
  const std::string to = JoinPath(dir, CopyFileName(rank, step));
  if (rename(from.c_str(), to.c_str()) != 0) {
    Status status = ErrnoToStatus(errno, "rename(" + from + ", " + to + ")");
    unlink(from.c_str());
    return status;
  }
  std::vector<HeldCopy> mine;
  for (const HeldCopy& copy : ListCopies(dir)) {
    if (copy.rank == rank) mine.push_back(copy);  // sorted by step
  }
  for (size_t i = 0; i + keep < mine.size(); ++i) {
    const std::string old = JoinPath(dir, CopyFileName(rank, mine[i].step));
    if (unlink(old.c_str()) != 0 && errno != ENOENT) {
      DS_LOG_WARN("store", "cannot remove {}: {}", old, std::strerror(errno));
    }
  }
  return OkStatus();
}

StatusOr<CopyFileInfo> StatCopyFd(int fd, const std::string& name) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoToStatus(errno, "fstat(" + name + ")");
  if (!S_ISREG(st.st_mode) || st.st_size < kCopyTrailerBytes) {
    return DataLossError(fmt::format("{}: not a copy file ({} bytes, no trailer)", name,
                                     static_cast<int64_t>(st.st_size)));
  }
  unsigned char trailer[kCopyTrailerBytes];
  DS_RETURN_IF_ERROR(PreadAll(fd, reinterpret_cast<char*>(trailer), sizeof(trailer),
                              st.st_size - kCopyTrailerBytes, name));
  if (std::memcmp(trailer + 4, kTrailerMagic, 4) != 0) {
    return DataLossError(name + ": malformed trailer (no \"DSCE\" at the end)");
  }
  CopyFileInfo info;
  info.bytes = st.st_size - kCopyTrailerBytes;
  for (int i = 0; i < 4; ++i) info.crc32c |= static_cast<uint32_t>(trailer[i]) << (8 * i);
  return info;
}

StatusOr<CopyFileInfo> StatCopyFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  StatusOr<CopyFileInfo> info = StatCopyFd(fd, path);
  close(fd);
  return info;
}

StatusOr<std::string> ReadCopyFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  StatusOr<CopyFileInfo> info = StatCopyFd(fd, path);
  std::string bytes;
  uint32_t crc = 0;
  Status status = info.status();
  if (status.ok()) bytes.resize(static_cast<size_t>(info->bytes));
  for (size_t done = 0; status.ok() && done < bytes.size();) {  // checked while in cache
    const size_t n = std::min(kReadChunkBytes, bytes.size() - done);
    status = PreadAll(fd, bytes.data() + done, n, static_cast<int64_t>(done), path);
    crc = Crc32cExtend(crc, bytes.data() + done, n);
    done += n;
  }
  close(fd);
  DS_RETURN_IF_ERROR(status);
  if (crc != info->crc32c) {
    return DataLossError(fmt::format("{}: CRC32C mismatch: {} of the bytes, {} in the trailer",
                                     path, Crc32cHex(crc), Crc32cHex(info->crc32c)));
  }
  return bytes;
}

}  // namespace ds::launcher
