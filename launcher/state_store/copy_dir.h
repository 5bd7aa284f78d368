// CopyDir: a node's in-memory checkpoints as files in RAM (tmpfs). Every few steps each worker
// writes a copy of its rank's state into its agent's directory and sends it to the buddy node's
// agent (CopyServer); a restarted worker reads the copy of the step it resumes from, from the
// directory or over the network (CopyClient). The filesystem is the only shared state: writers
// in other processes (the node's workers) and the agent's server use the same functions below.
//
// A complete copy is the file "r<RANK>.s<STEP>.copy": the copy's bytes, then an 8-byte trailer,
// the CRC-32C of the bytes (little-endian u32) and the 4 bytes "DSCE". A copy is written to a
// part file "r<RANK>.s<STEP>.part.<PID>.<N>" and renamed into place once its trailer is written,
// so a reader never sees half a copy; a file opened before a rename or prune stays readable.
//
//   DS_ASSIGN_OR_RETURN(std::unique_ptr<CopyDir> dir, CopyDir::Create());
//   std::string part;
//   DS_ASSIGN_OR_RETURN(int fd, OpenPart(dir->path(), rank, step, &part));
//   ... write(fd, bytes) while crc = Crc32cExtend(crc, ...) ...
//   DS_RETURN_IF_ERROR(WriteTrailer(fd, crc));
//   close(fd);
//   DS_RETURN_IF_ERROR(CommitPart(dir->path(), part, rank, step));  // keeps the newest 2
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace ds::launcher {

// One complete copy in a directory.
struct HeldCopy {
  int rank = 0;
  int64_t step = 0;
  int64_t bytes = 0;  // the copy, without the trailer
};

inline constexpr int64_t kCopyTrailerBytes = 8;
// The largest copy a server accepts or a client fetches.
inline constexpr int64_t kMaxCopyBytes = int64_t{64} << 30;

// "r<RANK>.s<STEP>.copy".
std::string CopyFileName(int rank, int64_t step);

// An agent's private directory of copies (0700): under $DS_COPY_ROOT when set, else under
// /dev/shm when it exists (RAM), else $TMPDIR or /tmp. The destructor removes it with its files
// (an agent killed with SIGKILL leaves it behind). Thread-safe (it holds nothing but the path;
// every call reads the directory).
class CopyDir {
 public:
  static StatusOr<std::unique_ptr<CopyDir>> Create();
  ~CopyDir();

  CopyDir(const CopyDir&) = delete;
  CopyDir& operator=(const CopyDir&) = delete;

  const std::string& path() const { return path_; }
  // The complete copies (not parts), sorted by (rank, step).
  std::vector<HeldCopy> Held() const;
  // Removes the copies with a step later than `step` (a restart resumed from `step`; later
  // copies belong to an abandoned timeline). -1 removes all.
  void DropAfter(int64_t step);
  // Total bytes of the complete copies (trailers not counted).
  int64_t bytes() const;

 private:
  explicit CopyDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

// The complete copies in `dir`, sorted by (rank, step) (CopyDir::Held for any directory).
std::vector<HeldCopy> ListCopies(const std::string& dir);

// Writers (the server, and workers on the same node, which are given the directory's path):
// a new part file for rank/step's copy, opened O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC 0600; its path
// in *part. The caller owns the descriptor.
StatusOr<int> OpenPart(const std::string& dir, int rank, int64_t step, std::string* part);
// Writes the trailer at the current offset and ends the file there (a reused part may have been
// longer).
Status WriteTrailer(int fd, uint32_t crc32c);
// As OpenPart, but when `rank` already has `keep` complete copies the oldest one's file becomes
// the part (renamed, then written over from the start): its pages are already allocated, so
// writing the next copy into RAM costs about half of a fresh file's.
StatusOr<int> OpenPartReusing(const std::string& dir, int rank, int64_t step, int keep,
                              std::string* part);
// Renames a finished part (trailer written, fd closed by the caller; `part` as OpenPart gave it)
// to CopyFileName(rank, step) atomically, replacing an older file of that name, then deletes
// that rank's complete copies beyond the newest `keep` (>= 1). A part that cannot be renamed
// is removed.
Status CommitPart(const std::string& dir, const std::string& part, int rank, int64_t step,
                  int keep = 2);

// A complete copy file's size without the trailer and the trailer's CRC.
struct CopyFileInfo {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};
// DataLoss naming the file if the trailer is missing or malformed.
StatusOr<CopyFileInfo> StatCopyFile(const std::string& path);
// The same for an open copy file (`name` names it in errors); the file offset is not used.
StatusOr<CopyFileInfo> StatCopyFd(int fd, const std::string& name);
// The copy's bytes, read whole and checked against the trailer's CRC (DataLoss naming the file
// on mismatch).
StatusOr<std::string> ReadCopyFile(const std::string& path);

// Writes all of [data, data + n) to `fd` (retries EINTR and short writes); `what` names the
// file in errors.
Status WriteAll(int fd, const void* data, size_t n, const std::string& what);

}  // namespace ds::launcher
