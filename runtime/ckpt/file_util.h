// POSIX file helpers for checkpoint I/O: durable writes (fsync file, rename, fsync dir),
// read-only memory maps, and directory utilities that report errors as Status with the
// path in the message. Each object is used by one thread at a time; functions are
// thread-safe when they touch different paths.
//
//   DS_ASSIGN_OR_RETURN(auto w, FileWriter::Create(path));
//   DS_RETURN_IF_ERROR(w->Append(bytes, n));
//   DS_RETURN_IF_ERROR(w->SyncAndClose());
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::ckpt {

// "a" + "/" + "b" (no doubled slash).
std::string JoinPath(const std::string& a, const std::string& b);
// The directory part of `path` ("." when there is none).
std::string DirName(const std::string& path);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);

// Writes sequentially to a new (truncated) file. Not thread-safe.
class FileWriter {
 public:
  static StatusOr<std::unique_ptr<FileWriter>> Create(const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Writes all `n` bytes (retrying short writes and EINTR).
  Status Append(const void* data, size_t n);
  // fsync then close; the writer is unusable afterwards.
  Status SyncAndClose();
  uint64_t bytes_written() const { return bytes_; }

 private:
  FileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
};

// Writes `contents` to `path` + ".tmp", fsyncs, renames it over `path`, fsyncs the directory.
Status WriteFileAtomic(const std::string& path, std::string_view contents);
StatusOr<std::string> ReadFileToString(const std::string& path);
// fsync of a directory, making renames and creations inside it durable.
Status SyncDir(const std::string& dir);
// rm -rf; OK when `path` does not exist.
Status RemoveTree(const std::string& path);
// mkdir -p.
Status CreateDirs(const std::string& path);
// Names (not paths) of the entries of `dir`, sorted.
StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

// Hands back the process's resident pages of the read-only file mapping bytes [addr, addr + len)
// (the whole pages inside it; madvise MADV_DONTNEED): they stay in the page cache and fault in
// again if read, but no longer count in this process's RSS. For readers that stream a large
// mapped file once.
void DropResidentPages(const void* addr, size_t len);
// Asks the kernel to read [addr, addr + len) of a file mapping ahead (MADV_WILLNEED): a reader
// about to stream a span of a cold file waits on one large read instead of page faults.
void ReadAhead(const void* addr, size_t len);

// Reads mapped file spans into the page cache in the background, in the order given
// (MADV_WILLNEED, 16 MiB at a time), so a reader converting them finds them in memory while
// the disk streams ahead in the order it reads: a cold load runs at the disk's speed instead
// of its page faults', and a rank that reads half a file asks the disk for that half only.
// Stops and joins when destroyed; the spans' mappings must outlive it.
class SpanPrefetcher {
 public:
  explicit SpanPrefetcher(std::vector<std::pair<const void*, size_t>> spans);
  ~SpanPrefetcher();
  SpanPrefetcher(const SpanPrefetcher&) = delete;
  SpanPrefetcher& operator=(const SpanPrefetcher&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A whole file mapped read-only (MAP_PRIVATE). Move-only; unmaps on destruction. The
// address stays fixed for the object's life, also across moves.
class MappedFile {
 public:
  static StatusOr<MappedFile> Open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint8_t* data_ = nullptr;  // nullptr for an empty file
  size_t size_ = 0;
};

}  // namespace ds::ckpt
