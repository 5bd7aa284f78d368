#include "zero/aio/nvme_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "zero/aio/io_file.h"

namespace ds::zero {

Status CheckSwapDir(const std::string& key, const std::string& path) {
  const std::string what = key + " " + path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFoundError(what + ": " + std::strerror(errno) + " (create the directory first)");
  if (!S_ISDIR(st.st_mode)) return FailedPreconditionError(what + ": not a directory");
  const std::string probe = path + "/.ds_swap_probe." + std::to_string(::getpid());
  StatusOr<IoFile> f = IoFile::Open(probe, IoFile::kCreate);
  if (!f.ok())
    return PermissionDeniedError(what + ": cannot create a swap file there (" +
                                 f.status().message() + ")");
  ::unlink(probe.c_str());
  return OkStatus();
}

}  // namespace ds::zero
