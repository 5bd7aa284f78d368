// CopyClient: a node's side of another agent's CopyServer (copy_server.h has the wire format).
// Each call opens its own TCP connection, so a client may be used from several threads at once.
// Errors name the address, the op, rank and step: "copy server 10.0.0.2:7000: GET rank 3 step
// 1200: ...". Every call has a timeout bounding it whole (connect, every read and write).
//
//   CopyClient buddy("10.0.0.2:7000", token);
//   DS_RETURN_IF_ERROR(buddy.PutFile(rank, step, copy_path, std::chrono::seconds(120)));
//   DS_ASSIGN_OR_RETURN(std::string bytes, buddy.Get(rank, step, std::chrono::seconds(120)));
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "launcher/state_store/link_probe.h"
#include "runtime/base/status.h"

namespace ds::launcher {

class CopyClient {
 public:
  // `address`: "host:port"; host may be a name, an IPv4 literal or "[v6]".
  CopyClient(std::string address, std::string token);

  const std::string& address() const { return address_; }

  // Sends the complete copy file `path` (StatCopyFile: the bytes without the trailer, with its
  // CRC) as rank/step's copy, with sendfile(2). OK once the server has stored it.
  Status PutFile(int rank, int64_t step, const std::string& path,
                 std::chrono::milliseconds timeout);
  // rank/step's copy from the server, checked against its CRC (DataLoss otherwise). NotFound
  // naming rank, step and the address when absent.
  StatusOr<std::string> Get(int rank, int64_t step, std::chrono::milliseconds timeout);
  // How fast this node reaches the server: ping latency and a sink's bandwidth (link_probe.h).
  StatusOr<LinkSample> Probe(const ProbeBudget& budget, std::chrono::milliseconds timeout);

 private:
  const std::string address_;
  const std::string token_;
};

}  // namespace ds::launcher
