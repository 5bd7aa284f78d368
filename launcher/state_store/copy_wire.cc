#include "launcher/state_store/copy_wire.h"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/status_macros.h"

namespace ds::launcher::copy_wire {
namespace {

constexpr int64_t kSendFileChunkBytes = int64_t{8} << 20;

void Put32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void Put64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// The status of a failed socket call: a timeout is DeadlineExceeded, a lost peer Unavailable.
Status SocketError(int err, const char* call) {
  if (err == EAGAIN || err == EWOULDBLOCK)
    return DeadlineExceededError(std::string(call) + ": timed out");
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ESHUTDOWN) {
    return UnavailableError(std::string(call) + ": " + std::strerror(err));
  }
  return ErrnoToStatus(err, call);
}

// Holds SIGPIPE off this thread while sendfile(2) (which has no MSG_NOSIGNAL) writes to a socket
// the peer may have closed; a SIGPIPE raised meanwhile is consumed, not delivered.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old_);
    was_pending_ = IsPending();
  }
  ~SigpipeGuard() {
    const int saved = errno;
    if (!was_pending_ && IsPending()) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      const timespec zero{0, 0};
      while (sigtimedwait(&set, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }

 private:
  static bool IsPending() {
    sigset_t pending;
    sigemptyset(&pending);
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  sigset_t old_;
  bool was_pending_ = false;
};

// True when the peer has sent something (or closed, or failed) that is waiting to be read.
bool PeerSpoke(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

}  // namespace

const char* OpName(uint32_t op) {
  if (op == kOpPut) return "PUT";
  if (op == kOpGet) return "GET";
  if (op == kOpProbe) return "PROBE";
  return "unknown op";
}

std::string EncodeRequest(const Request& request, const std::string& token) {
  std::string out(kMagic, sizeof(kMagic));
  Put32(&out, request.op);
  Put32(&out, static_cast<uint32_t>(request.rank));
  Put64(&out, static_cast<uint64_t>(request.step));
  Put64(&out, static_cast<uint64_t>(request.bytes));
  Put32(&out, request.crc32c);
  Put32(&out, static_cast<uint32_t>(token.size()));
  out += token;
  return out;
}

bool DecodeRequestHeader(const char* header, Request* request, uint32_t* token_bytes) {
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) return false;
  request->op = Get32(header + 8);
  request->rank = static_cast<int32_t>(Get32(header + 12));
  request->step = static_cast<int64_t>(Get64(header + 16));
  request->bytes = static_cast<int64_t>(Get64(header + 24));
  request->crc32c = Get32(header + 32);
  *token_bytes = Get32(header + 36);
  return true;
}

std::string EncodeReply(const Status& status) {
  std::string out;
  const std::string& message = status.message();
  const size_t n = std::min<size_t>(message.size(), kMaxMessageBytes);
  Put32(&out, static_cast<uint32_t>(status.code()));
  Put32(&out, static_cast<uint32_t>(n));
  out.append(message, 0, n);
  return out;
}

std::string EncodeCopyHeader(int64_t bytes, uint32_t crc32c) {
  std::string out;
  Put64(&out, static_cast<uint64_t>(bytes));
  Put32(&out, crc32c);
  return out;
}

void DecodeCopyHeader(const char* header, int64_t* bytes, uint32_t* crc32c) {
  *bytes = static_cast<int64_t>(Get64(header));
  *crc32c = Get32(header + 8);
}

Status SetSocketTimeouts(int fd, std::chrono::milliseconds timeout) {
  const int64_t ms = std::max<int64_t>(timeout.count(), 1);  // 0 would mean "never"
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)");
  }
  return OkStatus();
}

Status Conn::Arm(int option) {
  if (!deadline_.has_value()) return OkStatus();
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
      *deadline_ - std::chrono::steady_clock::now());
  if (left.count() <= 0) return DeadlineExceededError("deadline passed");
  const int64_t us = std::max<int64_t>(left.count(), 1000);
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  if (setsockopt(fd_, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(timeout)");
  }
  return OkStatus();
}

Status Conn::Send(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    DS_RETURN_IF_ERROR(Arm(SO_SNDTIMEO));
    const ssize_t sent = send(fd_, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return SocketError(errno, "send");
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return OkStatus();
}

StatusOr<size_t> Conn::RecvSome(void* data, size_t n) {
  DS_RETURN_IF_ERROR(Arm(SO_RCVTIMEO));
  for (;;) {
    const ssize_t got = recv(fd_, data, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return SocketError(errno, "recv");
    return static_cast<size_t>(got);
  }
}

Status Conn::Recv(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    DS_ASSIGN_OR_RETURN(const size_t got, RecvSome(p + done, n - done));
    if (got == 0) {
      return UnavailableError(fmt::format("peer closed after {} of {} bytes", done, n));
    }
    done += got;
  }
  return OkStatus();
}

Status Conn::SendFile(int in_fd, int64_t offset, int64_t n, bool* early_reply) {
  SigpipeGuard guard;
  off_t off = static_cast<off_t>(offset);
  int64_t left = n;
  while (left > 0) {
    if (early_reply != nullptr && PeerSpoke(fd_)) {
      *early_reply = true;
      return OkStatus();
    }
    DS_RETURN_IF_ERROR(Arm(SO_SNDTIMEO));
    const size_t chunk = static_cast<size_t>(std::min(left, kSendFileChunkBytes));
    const ssize_t sent = sendfile(fd_, in_fd, &off, chunk);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return SocketError(errno, "sendfile");
    if (sent == 0) {
      return DataLossError(
          fmt::format("sendfile: the file ended after {} of {} bytes", n - left, n));
    }
    left -= sent;
  }
  return OkStatus();
}

Status Conn::ReadReply(Status* remote) {
  char header[8];
  DS_RETURN_IF_ERROR(Recv(header, sizeof(header)));
  const uint32_t code = Get32(header);
  const uint32_t length = Get32(header + 4);
  if (length > kMaxMessageBytes) {
    return InternalError(fmt::format("malformed reply: a message of {} bytes", length));
  }
  std::string message(length, '\0');
  DS_RETURN_IF_ERROR(Recv(message.data(), message.size()));
  if (code == 0) {
    *remote = OkStatus();
  } else {
    const StatusCode c = code <= static_cast<uint32_t>(StatusCode::kUnauthenticated)
                             ? static_cast<StatusCode>(code)
                             : StatusCode::kUnknown;
    *remote = Status(c, std::move(message));
  }
  return OkStatus();
}

}  // namespace ds::launcher::copy_wire
