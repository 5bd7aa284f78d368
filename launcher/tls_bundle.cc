#include "launcher/tls_bundle.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

constexpr char kMagic[] = "ds-tls";

StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, std::string("open TLS ") + what + " " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos)
    return InvalidArgumentError(std::string("TLS ") + what + " " + path +
                                (text.str().empty() ? " is empty" : " holds no PEM block"));
  return text.str();
}

Status WritePrivate(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      return ErrnoToStatus(e, "write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return ErrnoToStatus(errno, "close " + path);
  return OkStatus();
}

}  // namespace

StatusOr<TlsPems> ReadTlsPems(const std::string& ca_path, const std::string& cert_path,
                              const std::string& key_path) {
  TlsPems p;
  DS_ASSIGN_OR_RETURN(p.ca, ReadPemFile(ca_path, "CA"));
  DS_ASSIGN_OR_RETURN(p.cert, ReadPemFile(cert_path, "certificate"));
  DS_ASSIGN_OR_RETURN(p.key, ReadPemFile(key_path, "key"));
  return p;
}

std::string EncodeTlsBundle(const TlsPems& pems) {
  return std::string(kMagic) + " " + std::to_string(pems.ca.size()) + " " +
         std::to_string(pems.cert.size()) + " " + std::to_string(pems.key.size()) + "\n" + pems.ca +
         pems.cert + pems.key;
}

StatusOr<TlsPems> ReadTlsBundle(std::istream& in) {
  std::string header;
  if (!std::getline(in, header))
    return InvalidArgumentError("TLS bundle: nothing after the token on stdin");
  std::istringstream h(header);
  std::string magic;
  int64_t sizes[3] = {-1, -1, -1};
  h >> magic >> sizes[0] >> sizes[1] >> sizes[2];
  if (magic != kMagic || sizes[0] <= 0 || sizes[1] <= 0 || sizes[2] <= 0 ||
      sizes[0] + sizes[1] + sizes[2] > (int64_t{1} << 20))
    return InvalidArgumentError("TLS bundle: bad header \"" + header.substr(0, 40) + "\"");
  TlsPems p;
  std::string* parts[3] = {&p.ca, &p.cert, &p.key};
  const char* names[3] = {"CA", "certificate", "key"};
  for (int i = 0; i < 3; ++i) {
    parts[i]->resize(static_cast<size_t>(sizes[i]));
    if (!in.read(parts[i]->data(), sizes[i]))
      return InvalidArgumentError(std::string("TLS bundle: its ") + names[i] + " is cut short");
  }
  return p;
}

StatusOr<TlsPaths> WritePrivateTls(const TlsPems& pems, const std::string& parent) {
  std::string templ = parent + "/ds-tls-XXXXXX";
  if (!mkdtemp(templ.data())) return ErrnoToStatus(errno, "mkdtemp " + templ);
  TlsPaths t{templ, templ + "/ca.pem", templ + "/cert.pem", templ + "/key.pem"};
  if (chmod(t.dir.c_str(), 0700) != 0) return ErrnoToStatus(errno, "chmod " + t.dir);
  Status s = WritePrivate(t.ca, pems.ca);
  if (s.ok()) s = WritePrivate(t.cert, pems.cert);
  if (s.ok()) s = WritePrivate(t.key, pems.key);
  if (!s.ok()) {
    RemovePrivateTls(t);
    return s;
  }
  return t;
}

void RemovePrivateTls(const TlsPaths& paths) {
  for (const std::string* f : {&paths.ca, &paths.cert, &paths.key}) unlink(f->c_str());
  if (!paths.dir.empty()) rmdir(paths.dir.c_str());
}

}  // namespace ds::launcher
