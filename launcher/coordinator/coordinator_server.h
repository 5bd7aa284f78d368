// CoordinatorServer: the gRPC server of a job's control plane. It owns a CoordinatorState
// and serves the Coordinator service (agents, workers) and the Job service (ds-launch
// status / stop) of proto/coordinator.proto, plus the standard gRPC health service
// (grpc.health.v1.Health, "" = SERVING while up). Every Coordinator/Job call must carry
// the job token in the metadata "ds-job-token" (else UNAUTHENTICATED); the health service
// is open, as health probes carry no token. Plaintext, or TLS with an optional client CA.
//
// Thread-safe. Start() binds exactly the given address (port 0 = a free port, see port())
// and starts a ticker thread applying the protocol timers every tick_interval. The
// destructor calls Shutdown().
//
//   CoordinatorOptions options;
//   options.bind_address = "10.0.0.1:0";
//   options.token = token;
//   options.config.nodes = {{"worker-0", 8}, {"worker-1", 8}};
//   DS_ASSIGN_OR_RETURN(auto server, CoordinatorServer::Start(options));
//   // hand server->address() and the token to the agents, then:
//   DS_ASSIGN_OR_RETURN(JobOutcome outcome, server->WaitForEnd(std::chrono::hours(72)));
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/coordinator/coordinator_state.h"
#include "runtime/base/status.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace ds::launcher {

namespace internal {
class CoordinatorServiceImpl;
class JobServiceImpl;
}  // namespace internal

struct TlsServerOptions {
  std::string cert_path;       // PEM server certificate (chain); "" = plaintext
  std::string key_path;        // PEM private key of cert_path
  std::string client_ca_path;  // PEM CA; set = clients must present a certificate it signed
};

struct CoordinatorOptions {
  std::string bind_address = "127.0.0.1:0";  // host:port; port 0 = any free port
  std::string token;                         // the job token; must not be empty
  TlsServerOptions tls;
  CoordinatorConfig config;      // hostfile nodes, rendezvous windows, restarts, JobSpec
  const Clock* clock = nullptr;  // null = SteadyClock(); borrowed
  std::chrono::milliseconds tick_interval{50};
};

class CoordinatorServer {
 public:
  // InvalidArgument for a bad config or empty token; NotFound/PermissionDenied for
  // unreadable TLS files; Unavailable when the address cannot be bound.
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(const CoordinatorOptions& options);
  ~CoordinatorServer();

  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // The port actually bound.
  int port() const { return port_; }
  // The bind address's host with port(): "127.0.0.1:41234" ("[::1]:41234" for IPv6).
  const std::string& address() const { return address_; }
  // The logic behind the services: read status and logs, Stop(), etc. Valid until the
  // server is destroyed.
  CoordinatorState& state() { return *state_; }
  // Blocks until the job is over (see CoordinatorState::WaitForEnd).
  StatusOr<JobOutcome> WaitForEnd(std::chrono::milliseconds timeout);
  // Wakes every blocked call (they return UNAVAILABLE), stops serving (in-flight calls get
  // `grace` to finish), sets health NOT_SERVING and joins the ticker. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

 private:
  CoordinatorServer() = default;
  void TickLoop(std::chrono::milliseconds interval);

  int port_ = 0;
  std::string address_;
  std::unique_ptr<CoordinatorState> state_;
  std::unique_ptr<internal::CoordinatorServiceImpl> coordinator_service_;
  std::unique_ptr<internal::JobServiceImpl> job_service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread ticker_;  // runs TickLoop; joined by Shutdown()

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
};

}  // namespace ds::launcher
