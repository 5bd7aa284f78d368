#include "launcher/state_store/copy_client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "launcher/state_store/copy_dir.h"
#include "launcher/state_store/copy_wire.h"
#include "launcher/state_store/link_probe.h"
#include "runtime/base/crc32c.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using copy_wire::Conn;
using copy_wire::Request;
using Deadline = Conn::Deadline;

// Closes a descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  const int fd_;
};

// Splits "host:port" or "[v6]:port".
Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  size_t colon = std::string::npos;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find("]:");
    if (close != std::string::npos) {
      *host = address.substr(1, close - 1);
      colon = close + 1;
    }
  } else {
    colon = address.rfind(':');
    if (colon != std::string::npos) *host = address.substr(0, colon);
    if (host->find(':') != std::string::npos) colon = std::string::npos;  // a bare IPv6 literal
  }
  if (colon != std::string::npos) *port = address.substr(colon + 1);
  const bool digits =
      !port->empty() && port->size() <= 5 &&
      std::all_of(port->begin(), port->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (colon == std::string::npos || host->empty() || !digits) {
    return InvalidArgumentError("malformed address (want host:port or [v6]:port)");
  }
  return OkStatus();
}

// Connects to one resolved address before the deadline; a blocking socket.
StatusOr<int> ConnectOne(const addrinfo* ai, Deadline deadline) {
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
  while (err == EINPROGRESS || err == EINTR) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      close(fd);
      return DeadlineExceededError("connect: timed out");
    }
    pollfd p{fd, POLLOUT, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends it
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  }
  if (err != 0) {
    close(fd);
    return UnavailableError(std::string("connect: ") + std::strerror(err));
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Connects to `address` before the deadline, trying each address its host resolves to.
StatusOr<int> Connect(const std::string& address, Deadline deadline) {
  std::string host, port;
  DS_RETURN_IF_ERROR(SplitAddress(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) return UnavailableError(fmt::format("resolve {}: {}", host, gai_strerror(rc)));
  Status last = UnavailableError("no address for " + host);
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    StatusOr<int> fd = ConnectOne(ai, deadline);
    if (fd.ok()) {
      freeaddrinfo(found);
      return fd;
    }
    last = fd.status();
  }
  freeaddrinfo(found);
  return last;
}

// A PUT on a new connection: the header, the copy file's bytes, then the server's reply.
Status PutOver(const std::string& address, const std::string& token, const Request& req, int file,
               Deadline deadline) {
  DS_ASSIGN_OR_RETURN(const int fd, Connect(address, deadline));
  FdCloser closer(fd);
  Conn io(fd, deadline);
  const std::string head = copy_wire::EncodeRequest(req, token);
  Status sent = io.Send(head.data(), head.size());
  bool early_reply = false;
  if (sent.ok()) sent = io.SendFile(file, 0, req.bytes, &early_reply);
  if (sent.ok() && !early_reply) shutdown(fd, SHUT_WR);
  Status remote;
  const Status got = io.ReadReply(&remote);
  if (!got.ok()) return sent.ok() ? got.WithPrefix("reading the reply") : sent;
  if (remote.ok() && early_reply)
    return InternalError("an OK reply before the whole copy was sent");
  return remote;  // the server's reason, even when sending failed after it refused
}

// A GET on a new connection: the reply, then the copy, checked by its CRC as it arrives.
StatusOr<std::string> GetOver(const std::string& address, const std::string& token,
                              const Request& req, Deadline deadline) {
  DS_ASSIGN_OR_RETURN(const int fd, Connect(address, deadline));
  FdCloser closer(fd);
  Conn io(fd, deadline);
  const std::string head = copy_wire::EncodeRequest(req, token);
  DS_RETURN_IF_ERROR(io.Send(head.data(), head.size()));
  Status remote;
  DS_RETURN_IF_ERROR(io.ReadReply(&remote));
  DS_RETURN_IF_ERROR(remote);
  char header[copy_wire::kCopyHeaderBytes];
  DS_RETURN_IF_ERROR(io.Recv(header, sizeof(header)));
  int64_t n = 0;
  uint32_t expected = 0;
  copy_wire::DecodeCopyHeader(header, &n, &expected);
  if (n < 0 || n > kMaxCopyBytes) {
    return InternalError(fmt::format("malformed reply: a copy of {} bytes", n));
  }
  std::string bytes(static_cast<size_t>(n), '\0');
  uint32_t crc = 0;
  for (size_t done = 0; done < bytes.size();) {
    const size_t chunk = std::min(copy_wire::kIoBufferBytes, bytes.size() - done);
    DS_RETURN_IF_ERROR(io.Recv(bytes.data() + done, chunk));
    crc = Crc32cExtend(crc, bytes.data() + done, chunk);  // while in cache
    done += chunk;
  }
  if (crc != expected) {
    return DataLossError(fmt::format("CRC32C mismatch: {} of the bytes received, {} sent",
                                     Crc32cHex(crc), Crc32cHex(expected)));
  }
  return bytes;
}

}  // namespace

CopyClient::CopyClient(std::string address, std::string token)
    : address_(std::move(address)), token_(std::move(token)) {}

Status CopyClient::PutFile(int rank, int64_t step, const std::string& path,
                           std::chrono::milliseconds timeout) {
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  const std::string what =
      fmt::format("copy server {}: PUT rank {} step {} ({})", address_, rank, step, path);
  const int file = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) return ErrnoToStatus(errno, "open").WithPrefix(what);
  FdCloser file_closer(file);
  StatusOr<CopyFileInfo> info = StatCopyFd(file, path);  // the fd keeps a pruned file readable
  if (!info.ok()) return info.status().WithPrefix(what);
  if (info->bytes > kMaxCopyBytes) {
    return ResourceExhaustedError(
        fmt::format("{}: {} bytes, over the limit of {}", what, info->bytes, kMaxCopyBytes));
  }
  Request req;
  req.op = copy_wire::kOpPut;
  req.rank = rank;
  req.step = step;
  req.bytes = info->bytes;
  req.crc32c = info->crc32c;
  const Status status = PutOver(address_, token_, req, file, deadline);
  return status.ok() ? status : status.WithPrefix(what);
}

StatusOr<std::string> CopyClient::Get(int rank, int64_t step, std::chrono::milliseconds timeout) {
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  Request req;
  req.op = copy_wire::kOpGet;
  req.rank = rank;
  req.step = step;
  StatusOr<std::string> bytes = GetOver(address_, token_, req, deadline);
  if (!bytes.ok()) {
    return bytes.status().WithPrefix(
        fmt::format("copy server {}: GET rank {} step {}", address_, rank, step));
  }
  return bytes;
}

StatusOr<LinkSample> CopyClient::Probe(const ProbeBudget& budget,
                                       std::chrono::milliseconds timeout) {
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  auto probe = [&]() -> StatusOr<LinkSample> {
    DS_ASSIGN_OR_RETURN(const int fd, Connect(address_, deadline));
    FdCloser closer(fd);
    Conn io(fd, deadline);
    Request req;
    req.op = copy_wire::kOpProbe;
    const std::string head = copy_wire::EncodeRequest(req, token_);
    DS_RETURN_IF_ERROR(io.Send(head.data(), head.size()));
    Status remote;
    DS_RETURN_IF_ERROR(io.ReadReply(&remote));
    DS_RETURN_IF_ERROR(remote);
    return copy_wire::RunProbe(io, budget);
  };
  StatusOr<LinkSample> s = probe();
  if (!s.ok()) return s.status().WithPrefix(fmt::format("copy server {}: PROBE", address_));
  return s;
}

}  // namespace ds::launcher
