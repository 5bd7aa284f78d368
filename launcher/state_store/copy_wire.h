// The wire of CopyServer and CopyClient (the format is documented in copy_server.h): encoding of
// requests and replies, and blocking socket I/O that retries EINTR and short transfers. Private
// to launcher/state_store.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/base/status.h"

namespace ds::launcher::copy_wire {

inline constexpr char kMagic[8] = {'D', 'S', 'C', 'O', 'P', 'Y', '0', '1'};
inline constexpr uint32_t kOpPut = 1;
inline constexpr uint32_t kOpGet = 2;
inline constexpr uint32_t kOpProbe = 3;  // link_probe.h
// magic 8, op 4, rank 4, step 8, bytes 8, crc32c 4, token length 4.
inline constexpr size_t kRequestHeaderBytes = 40;
inline constexpr uint32_t kMaxTokenBytes = 4096;
inline constexpr uint32_t kMaxMessageBytes = 64 << 10;  // a reply's message
inline constexpr size_t kIoBufferBytes = size_t{4} << 20;

struct Request {
  uint32_t op = 0;
  int32_t rank = 0;
  int64_t step = 0;
  int64_t bytes = 0;    // PUT only
  uint32_t crc32c = 0;  // PUT only
};

const char* OpName(uint32_t op);  // "PUT", "GET", "op 7"

// The header and the token, ready to send.
std::string EncodeRequest(const Request& request, const std::string& token);
// Decodes a fixed header of kRequestHeaderBytes; false when the magic is wrong.
bool DecodeRequestHeader(const char* header, Request* request, uint32_t* token_bytes);
// A reply's status code and message; a GET's OK is followed by EncodeCopyHeader.
std::string EncodeReply(const Status& status);
std::string EncodeCopyHeader(int64_t bytes, uint32_t crc32c);  // bytes i64, crc32c u32
inline constexpr size_t kCopyHeaderBytes = 12;
void DecodeCopyHeader(const char* header, int64_t* bytes, uint32_t* crc32c);

// Blocking I/O on a connected socket. With a deadline, every call sets SO_RCVTIMEO/SO_SNDTIMEO
// to the time left first (DeadlineExceeded once it passed); without, the socket's own timeouts
// apply. A timed-out call is DeadlineExceeded; errors name the call only (callers add context).
class Conn {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  Conn(int fd, std::optional<Deadline> deadline) : fd_(fd), deadline_(deadline) {}

  int fd() const { return fd_; }
  Status Send(const void* data, size_t n);
  // Exactly n bytes; an EOF before is Unavailable ("peer closed after X of N bytes").
  Status Recv(void* data, size_t n);
  // Up to n bytes; 0 at EOF.
  StatusOr<size_t> RecvSome(void* data, size_t n);
  // Sends [offset, offset + n) of the file `in_fd` with sendfile(2), SIGPIPE held off. When
  // `early_reply` is given, stops between chunks once the peer has sent something (a refusal
  // before the end) and sets it true.
  Status SendFile(int in_fd, int64_t offset, int64_t n, bool* early_reply);
  // Reads a reply's status into *remote; the returned status is the transport's.
  Status ReadReply(Status* remote);

 private:
  Status Arm(int option);  // SO_RCVTIMEO or SO_SNDTIMEO to the time left, with a deadline

  const int fd_;
  const std::optional<Deadline> deadline_;
};

// Sets SO_RCVTIMEO and SO_SNDTIMEO of `fd`.
Status SetSocketTimeouts(int fd, std::chrono::milliseconds timeout);

}  // namespace ds::launcher::copy_wire
