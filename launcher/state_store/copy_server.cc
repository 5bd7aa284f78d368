#include "launcher/state_store/copy_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <vector>

#include "launcher/state_store/copy_dir.h"
#include "launcher/state_store/copy_wire.h"
#include "launcher/state_store/link_probe.h"
#include "runtime/base/crc32c.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

using copy_wire::Conn;
using copy_wire::Request;

constexpr std::chrono::seconds kIoTimeout{120};
constexpr size_t kMaxConnections = 64;
constexpr int64_t kMaxDrainBytes = kMaxCopyBytes + (int64_t{1} << 20);

// Compares over the longer length, so a prefix of the token takes as long as a miss.
bool TokenEquals(std::string_view a, std::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string PeerName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
  }
  return "?";
}

// A non-blocking listening socket on host:port (host "" or "[v6]" allowed); the bound port in
// *bound.
StatusOr<int> Listen(std::string host, int port, int* bound) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) return UnavailableError(fmt::format("resolve {}: {}", host, gai_strerror(rc)));
  Status last = UnavailableError("no address for " + host);
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = ErrnoToStatus(errno, "socket");
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      *bound = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      freeaddrinfo(found);
      return fd;
    }
    last = ErrnoToStatus(errno, fmt::format("bind/listen({}:{})", host, port));
    close(fd);
  }
  freeaddrinfo(found);
  return last;
}

// Reads and drops what the peer still sends, until it closes (or a timeout, or the cap): a
// socket closed with unread bytes would reset the connection and lose the reply just sent.
void Drain(Conn& io) {
  shutdown(io.fd(), SHUT_WR);
  std::vector<char> sink(64 << 10);
  for (int64_t total = 0; total < kMaxDrainBytes;) {
    StatusOr<size_t> got = io.RecvSome(sink.data(), sink.size());
    if (!got.ok() || *got == 0) return;
    total += static_cast<int64_t>(*got);
  }
}

// Replies `status` and logs the refusal of `what` (one line), then drains the connection.
void Refuse(Conn& io, const std::string& what, const Status& status) {
  DS_LOG_WARN("store", "refused {}: {}", what, status.ToString());
  const std::string reply = copy_wire::EncodeReply(status);
  io.Send(reply.data(), reply.size()).IgnoreError();
  Drain(io);
}

// Receives a PUT's bytes, 4 MiB at a time, into the open part file `fd`, extending the CRC as
// they arrive; checks it against the request's and writes the trailer.
Status ReceiveInto(Conn& io, int fd, const std::string& part, const Request& req) {
  std::unique_ptr<char[]> buffer(new char[copy_wire::kIoBufferBytes]);
  uint32_t crc = 0;
  int64_t done = 0;
  while (done < req.bytes) {
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(copy_wire::kIoBufferBytes, req.bytes - done));
    size_t filled = 0;
    while (filled < want) {
      DS_ASSIGN_OR_RETURN(const size_t got, io.RecvSome(buffer.get() + filled, want - filled));
      if (got == 0) {
        return UnavailableError(fmt::format("the sender closed after {} of {} bytes",
                                            done + static_cast<int64_t>(filled), req.bytes));
      }
      filled += got;
    }
    DS_RETURN_IF_ERROR(WriteAll(fd, buffer.get(), filled, part));
    crc = Crc32cExtend(crc, buffer.get(), filled);
    done += static_cast<int64_t>(filled);
  }
  if (crc != req.crc32c) {
    return DataLossError(fmt::format("CRC32C mismatch: {} of the bytes received, {} sent",
                                     Crc32cHex(crc), Crc32cHex(req.crc32c)));
  }
  return WriteTrailer(fd, crc);
}

// Receives a PUT into a part file of `dir` and commits it; on failure the part is removed.
Status ReceiveCopy(Conn& io, const std::string& dir, const Request& req) {
  if (req.bytes < 0) return InvalidArgumentError(fmt::format("negative size {}", req.bytes));
  if (req.bytes > kMaxCopyBytes) {
    return ResourceExhaustedError(
        fmt::format("{} bytes, over the limit of {}", req.bytes, kMaxCopyBytes));
  }
  // Keep 3, reusing the oldest's pages: a copy arrives while the sender's next one may not have,
  // so 2 complete ones must stay while it is written (a lost node's ranks resume from the newest
  // step all of them still have here).
  std::string part;
  DS_ASSIGN_OR_RETURN(const int fd, OpenPartReusing(dir, req.rank, req.step, /*keep=*/3, &part));
  Status status = ReceiveInto(io, fd, part, req);
  if (close(fd) != 0 && status.ok()) status = ErrnoToStatus(errno, "close(" + part + ")");
  if (!status.ok()) {
    unlink(part.c_str());
    return status;
  }
  return CommitPart(dir, part, req.rank, req.step, /*keep=*/3);
}

// The NOT_FOUND of a GET, naming the steps held for the rank.
Status Missing(const std::string& dir, int rank, int64_t step) {
  std::string steps;
  for (const HeldCopy& held : ListCopies(dir)) {
    if (held.rank == rank) steps += (steps.empty() ? "" : ", ") + std::to_string(held.step);
  }
  return NotFoundError(fmt::format("no copy of rank {} step {} (held for rank {}: {})", rank, step,
                                   rank, steps.empty() ? "none" : "steps " + steps));
}

// Sends the copy file of a GET with its header. *replied: the OK went out (a later failure can
// only be logged).
Status SendCopy(Conn& io, const std::string& dir, const Request& req, bool* replied) {
  const std::string path = dir + "/" + CopyFileName(req.rank, req.step);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return Missing(dir, req.rank, req.step);
  if (fd < 0) return ErrnoToStatus(errno, "open(" + path + ")");
  StatusOr<CopyFileInfo> info = StatCopyFd(fd, path);  // the fd keeps a pruned copy readable
  Status status = info.status();
  if (status.ok()) {
    const std::string head =
        copy_wire::EncodeReply(OkStatus()) + copy_wire::EncodeCopyHeader(info->bytes, info->crc32c);
    *replied = true;
    status = io.Send(head.data(), head.size());
    if (status.ok()) status = io.SendFile(fd, 0, info->bytes, nullptr);
  }
  close(fd);
  return status;
}

// Reads a request's header and token; an error (already replied and logged) when malformed.
Status ReadRequest(Conn& io, const std::string& peer, Request* req, std::string* token) {
  char header[copy_wire::kRequestHeaderBytes];
  if (Status s = io.Recv(header, sizeof(header)); !s.ok()) {
    DS_LOG_WARN("store", "connection from {} ended before a request: {}", peer, s.ToString());
    return s;
  }
  uint32_t token_bytes = 0;
  Status bad;
  if (!copy_wire::DecodeRequestHeader(header, req, &token_bytes)) {
    bad = InvalidArgumentError("not a copy request (no \"DSCOPY01\" magic)");
  } else if (token_bytes > copy_wire::kMaxTokenBytes) {
    bad = InvalidArgumentError(
        fmt::format("a token of {} bytes (at most {})", token_bytes, copy_wire::kMaxTokenBytes));
  }
  if (!bad.ok()) {
    Refuse(io, "request from " + peer, bad);
    return bad;
  }
  token->resize(token_bytes);
  if (Status s = io.Recv(token->data(), token->size()); !s.ok()) {
    DS_LOG_WARN("store", "connection from {} ended in its token: {}", peer, s.ToString());
    return s;
  }
  return OkStatus();
}

}  // namespace

CopyServer::CopyServer(int listen_fd, int port, int wake_read, int wake_write, std::string token,
                       std::string dir)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      token_(std::move(token)),
      dir_(std::move(dir)) {}

StatusOr<std::unique_ptr<CopyServer>> CopyServer::Start(const std::string& bind_host, int port,
                                                        std::string token, std::string dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FailedPreconditionError("copy server: " + dir + " is not a directory");
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(fmt::format("copy server: port {} out of range", port));
  }
  int bound = 0;
  DS_ASSIGN_OR_RETURN(const int listen_fd, Listen(bind_host, port, &bound));
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(listen_fd);
    return ErrnoToStatus(errno, "pipe2");
  }
  std::unique_ptr<CopyServer> server(
      new CopyServer(listen_fd, bound, wake[0], wake[1], std::move(token), std::move(dir)));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  DS_LOG_INFO("store", "copy server on {}:{} serving {}", bind_host, bound, server->dir_);
  return server;
}

CopyServer::~CopyServer() { Shutdown(); }

void CopyServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      DS_LOG_ERROR("store", "copy server: poll: {}", std::strerror(errno));
      return;
    }
    if (stopping_.load() || fds[1].revents != 0) return;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        DS_LOG_WARN("store", "copy server: accept: {}", std::strerror(errno));
        poll(nullptr, 0, 100);  // let connections end before trying again
      }
      continue;  // EINTR, EAGAIN, ECONNABORTED: the next one
    }
    copy_wire::SetSocketTimeouts(fd, kIoTimeout).IgnoreError();
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ReapDone();
    std::lock_guard<std::mutex> lock(mu_);
    if (connections_.size() >= kMaxConnections) {
      DS_LOG_WARN("store", "copy server: refused {}: {} connections open", PeerName(addr),
                  connections_.size());
      close(fd);
      continue;
    }
    Connection& conn = connections_.emplace_back();
    conn.fd = fd;
    conn.peer = PeerName(addr);
    conn.thread = std::thread([this, c = &conn] { Serve(c); });
  }
}

void CopyServer::Serve(Connection* conn) {
  Conn io(conn->fd, std::nullopt);
  Request req;
  std::string token;
  if (ReadRequest(io, conn->peer, &req, &token).ok()) {
    const std::string what = fmt::format("{} of rank {} step {} from {}", copy_wire::OpName(req.op),
                                         req.rank, req.step, conn->peer);
    Status status;
    bool replied = false;
    if (!TokenEquals(token, token_)) {
      status = UnauthenticatedError("wrong job token");
    } else if (req.op == copy_wire::kOpProbe) {
      const std::string ok = copy_wire::EncodeReply(OkStatus());
      status = io.Send(ok.data(), ok.size());
      if (status.ok()) status = copy_wire::ServeProbe(io);
      replied = true;
    } else if (req.op != copy_wire::kOpPut && req.op != copy_wire::kOpGet) {
      status = InvalidArgumentError(fmt::format("unknown op {}", req.op));
    } else if (req.rank < 0 || req.step < 0) {
      status = InvalidArgumentError("negative rank or step");
    } else if (req.op == copy_wire::kOpPut) {
      status = ReceiveCopy(io, dir_, req);
    } else {
      status = SendCopy(io, dir_, req, &replied);
    }
    if (status.ok() && req.op == copy_wire::kOpPut) {
      DS_LOG_DEBUG("store", "stored {} ({} bytes)", what, req.bytes);
      const std::string reply = copy_wire::EncodeReply(OkStatus());
      io.Send(reply.data(), reply.size()).IgnoreError();
    } else if (!status.ok() && replied) {
      DS_LOG_WARN("store", "{} failed while sending: {}", what, status.ToString());
    } else if (status.code() == StatusCode::kNotFound) {
      DS_LOG_DEBUG("store", "{}: {}", what, status.message());
      const std::string reply = copy_wire::EncodeReply(status);
      io.Send(reply.data(), reply.size()).IgnoreError();
    } else if (!status.ok()) {
      Refuse(io, what, status);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  close(conn->fd);
  conn->fd = -1;
  conn->done = true;
}

void CopyServer::ReapDone() {
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      finished.push_back(std::move(it->thread));
      it = connections_.erase(it);
    }
  }
  for (std::thread& t : finished) t.join();
}

void CopyServer::Shutdown() {
  std::lock_guard<std::mutex> shutdown_lock(shutdown_mu_);
  if (stopping_.exchange(true)) return;
  const char byte = 1;
  while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Connection& conn : connections_) {
      if (conn.fd >= 0) shutdown(conn.fd, SHUT_RDWR);
      threads.push_back(std::move(conn.thread));
    }
  }
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    connections_.clear();
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
  DS_LOG_INFO("store", "copy server on port {} stopped", port_);
}

}  // namespace ds::launcher
