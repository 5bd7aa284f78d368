// CopyServer: serves a CopyDir's directory over raw TCP, so that a node's workers can send their
// copies to a buddy node's agent and a restarted worker can fetch one back. PUT: a copy arrives,
// is written to a part file while its CRC-32C is computed, checked against the CRC the sender
// gave, and committed (CommitPart, keep 3: written over the oldest's pages, OpenPartReusing, with
// 2 complete ones left meanwhile). GET: a copy file is sent with sendfile(2), with the
// CRC of its trailer (the client checks the bytes). Nothing is buffered in memory beyond 4 MiB
// per connection; the bytes are copied once into the page cache of the tmpfs. PROBE: a link
// probe (link_probe.h), which `parallel: auto` runs between the agents at launch.
//
// Every request carries the job token (compared in constant time); a wrong one is refused
// (UNAUTHENTICATED) and logged. One thread accepts; each connection is served on its own
// thread, one request per connection; socket timeouts (SO_RCVTIMEO/SO_SNDTIMEO, 120 s) bound
// every read and write.
//
// Wire format (all integers little-endian):
//   request   magic "DSCOPY01" (8 bytes), op u32 (1 PUT, 2 GET, 3 PROBE), rank i32, step i64,
//             bytes i64 (PUT only, else 0), crc32c u32 (PUT only, of the bytes),
//             token length u32 (at most 4096), the token; for PUT then `bytes` bytes (at most
//             64 GiB, kMaxCopyBytes), after which the sender shuts down its side for writing.
//   reply     status code u32 (StatusCode numbers, 0 OK), message length u32 (at most 64 KiB),
//             the message; for a GET with OK then bytes i64, crc32c u32 and the bytes.
// A server refusing a PUT early (token, header, disk) replies at once, then reads and drops
// what the sender still sends until it closes; the client stops sending when a reply arrives.
//
//   DS_ASSIGN_OR_RETURN(auto server, CopyServer::Start("0.0.0.0", 0, token, dir->path()));
//   int port = server->port();
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/base/status.h"

namespace ds::launcher {

class CopyServer {
 public:
  // Listens on bind_host:port (an IPv4 or IPv6 literal or a name; port 0 picks a free one) and
  // serves the copies of `dir`, which must exist.
  static StatusOr<std::unique_ptr<CopyServer>> Start(const std::string& bind_host, int port,
                                                     std::string token, std::string dir);
  ~CopyServer();  // Shutdown()

  CopyServer(const CopyServer&) = delete;
  CopyServer& operator=(const CopyServer&) = delete;

  int port() const { return port_; }
  // Idempotent: closes the listener, ends the live connections (shutdown(2)) and waits for
  // their threads.
  void Shutdown();

 private:
  struct Connection {
    int fd = -1;  // guarded by mu_; closed and set to -1 by its thread when done
    std::string peer;
    std::thread thread;
    bool done = false;  // guarded by mu_
  };

  CopyServer(int listen_fd, int port, int wake_read, int wake_write, std::string token,
             std::string dir);
  void AcceptLoop();
  void Serve(Connection* conn);
  void ReapDone();  // joins the threads of finished connections

  const int listen_fd_;
  const int port_;
  const int wake_read_;  // a pipe that wakes AcceptLoop for Shutdown
  const int wake_write_;
  const std::string token_;
  const std::string dir_;

  std::mutex shutdown_mu_;  // serializes Shutdown
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Connection> connections_;  // guarded by mu_ (the list; see Connection)
};

}  // namespace ds::launcher
