// CoordinatorClient: a connection to a job's coordinator, used by the agents (Join,
// Heartbeat, ReportExit, SendLogs, ReportStacks), the workers (ReportProgress, KV store for
// collective bootstrap) and `ds-launch status/stop` (GetStatus, Watch, Stop, HealthCheck).
// Every call carries the job token and a deadline; errors keep gRPC's code (same numbers
// as StatusCode) and read "Join(10.0.0.1:4000): <message>". No gRPC in this header.
//
// Thread-safe: one client may be shared by threads (one HTTP/2 channel underneath).
// Create() does not connect; the first call does (UNAVAILABLE if nobody listens).
//
//   ClientOptions options{"10.0.0.1:4000", token};
//   DS_ASSIGN_OR_RETURN(auto client, CoordinatorClient::Create(options));
//   DS_RETURN_IF_ERROR(client->KvSet(round, "nccl_id", id));
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/coordinator/coordinator_types.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct ClientOptions {
  std::string address;          // host:port of the coordinator
  std::string token;            // the job token
  std::string tls_ca_path;      // PEM CA of the server certificate; "" = plaintext
  std::string tls_cert_path;    // PEM client certificate, when the server requires one
  std::string tls_key_path;     // its key
  std::string tls_server_name;  // overrides the name checked against the certificate
  std::chrono::milliseconds rpc_timeout{10000};  // deadline of the non-blocking calls
};

class CoordinatorClient {
 public:
  // InvalidArgument for an empty address; NotFound etc. for unreadable TLS files.
  static StatusOr<std::unique_ptr<CoordinatorClient>> Create(const ClientOptions& options);
  ~CoordinatorClient();

  const std::string& address() const;

  // Blocks until the round closes, up to `timeout` (see CoordinatorState::Join).
  StatusOr<JoinResult> Join(const JoinRequest& request, std::chrono::milliseconds timeout);
  StatusOr<HeartbeatReply> Heartbeat(const HeartbeatRequest& request);
  Status ReportExit(const ExitReport& report);
  Status ReportProgress(const ProgressReport& report);
  Status SendLogs(const std::string& node_name, const std::vector<LogLine>& lines);
  // An agent's capture of one rank's thread stacks, asked for by a DUMP_STACKS heartbeat reply.
  Status ReportStacks(const StackReport& report);

  // KV store of `round` (0 = the current one). KvGet and KvWait block up to `timeout` on
  // the server (DeadlineExceeded naming the missing keys); the RPC deadline is
  // timeout + rpc_timeout.
  Status KvSet(int round, const std::string& key, const std::string& value);
  StatusOr<std::string> KvGet(int round, const std::string& key, std::chrono::milliseconds timeout);
  Status KvWait(int round, const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  StatusOr<int64_t> KvAdd(int round, const std::string& key, int64_t delta);

  // The job's status (the Job service's Status RPC).
  StatusOr<JobStatus> GetStatus();
  // Calls `on_status` with the status now and on every change until it returns false
  // (OK), the job ends and the server closes the stream (OK), or `timeout` passes
  // (DeadlineExceeded).
  Status Watch(const std::function<bool(const JobStatus&)>& on_status,
               std::chrono::milliseconds timeout);
  Status Stop(const std::string& reason);
  // OK when the server's health service answers SERVING; Unavailable otherwise.
  Status HealthCheck();

 private:
  struct Impl;
  explicit CoordinatorClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::launcher
