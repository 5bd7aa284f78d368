#include "launcher/launch/job_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/base/runtime_home.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

Status WriteFileAtomic(const std::string& path, const std::string& text, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + tmp + ")");
  bool ok = fchmod(fd, mode) == 0 &&
            write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  close(fd);
  if (!ok) return ErrnoToStatus(err, "write(" + tmp + ")");
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoToStatus(errno, "rename(" + tmp + ")");
  return OkStatus();
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoToStatus(errno, "mkdir(" + path + ")");
  return OkStatus();
}

StatusOr<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty())
    return NotFoundError(path + ": missing or empty");
  return line;
}

}  // namespace

StatusOr<std::string> NewJobToken() {
  unsigned char bytes[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open(/dev/urandom)");
  ssize_t n = read(fd, bytes, sizeof(bytes));
  close(fd);
  if (n != sizeof(bytes)) return InternalError("short read from /dev/urandom");
  std::string hex;
  char buf[3];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    hex += buf;
  }
  return hex;
}

StatusOr<JobDir> CreateJobDir(const std::string& token) {
  const std::string home = RuntimeHome();
  DS_RETURN_IF_ERROR(MakeDir(home));
  DS_RETURN_IF_ERROR(MakeDir(home + "/jobs"));
  auto now = std::chrono::system_clock::now().time_since_epoch();
  JobDir d;
  d.job_id = "job-" +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "-" +
             token.substr(0, 6);
  d.path = home + "/jobs/" + d.job_id;
  DS_RETURN_IF_ERROR(MakeDir(d.path));
  DS_RETURN_IF_ERROR(WriteFileAtomic(d.token_path(), token + "\n", 0600));
  DS_RETURN_IF_ERROR(WriteFileAtomic(home + "/current", d.path + "\n", 0600));
  return d;
}

Status WriteCoordinatorAddress(const JobDir& dir, const std::string& address) {
  return WriteFileAtomic(dir.coordinator_path(), address + "\n", 0600);
}

Status WriteTlsClient(const JobDir& dir, const TlsClient& tls) {
  return WriteFileAtomic(dir.path + "/tls",
                         tls.ca + "\n" + tls.cert + "\n" + tls.key + "\n" + tls.server_name + "\n",
                         0600);
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat(" + path + ")");
  if (st.st_mode & 077)
    return PermissionDeniedError(path +
                                 ": the token file must not be readable by others (chmod 600)");
  return ReadFirstLine(path);
}

StatusOr<JobAccess> CurrentJob() {
  const std::string home = RuntimeHome();
  auto dir = ReadFirstLine(home + "/current");
  if (!dir.ok())
    return NotFoundError("no job launched from here (" + home +
                         "/current is missing); "
                         "pass --coordinator and --token_file");
  JobAccess a;
  a.job_dir = *dir;
  DS_ASSIGN_OR_RETURN(a.coordinator, ReadFirstLine(*dir + "/coordinator"));
  DS_ASSIGN_OR_RETURN(a.token, ReadTokenFile(*dir + "/token"));
  std::ifstream tls(*dir + "/tls");
  if (tls) {
    std::getline(tls, a.tls.ca);
    std::getline(tls, a.tls.cert);
    std::getline(tls, a.tls.key);
    std::getline(tls, a.tls.server_name);
  }
  return a;
}

}  // namespace ds::launcher
