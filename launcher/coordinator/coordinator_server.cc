#include "launcher/coordinator/coordinator_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <pthread.h>

#include <fstream>
#include <sstream>

#include "launcher/coordinator/coordinator_service.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, std::string("open ") + what + " " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().empty()) return InvalidArgumentError(std::string(what) + " " + path + " is empty");
  return text.str();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const TlsServerOptions& tls) {
  if (tls.cert_path.empty()) return grpc::InsecureServerCredentials();
  if (tls.key_path.empty()) return InvalidArgumentError("TLS: a certificate without a key");
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  DS_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(tls.cert_path, "TLS certificate"));
  DS_ASSIGN_OR_RETURN(pair.private_key, ReadPem(tls.key_path, "TLS key"));
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!tls.client_ca_path.empty()) {
    DS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(tls.client_ca_path, "TLS client CA"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// "127.0.0.1:0" + 4123 -> "127.0.0.1:4123"; "[::]:0" -> "[::]:4123".
std::string WithPort(const std::string& bind_address, int port) {
  size_t colon = bind_address.rfind(':');
  std::string host = colon == std::string::npos ? bind_address : bind_address.substr(0, colon);
  return host + ":" + std::to_string(port);
}

}  // namespace

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options) {
  if (options.token.empty()) return InvalidArgumentError("coordinator: empty job token");
  if (options.tick_interval.count() <= 0) {
    return InvalidArgumentError("coordinator: tick_interval must be positive");
  }
  DS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      Credentials(options.tls));
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  DS_ASSIGN_OR_RETURN(server->state_, CoordinatorState::Create(options.config, options.clock));
  server->coordinator_service_ =
      std::make_unique<internal::CoordinatorServiceImpl>(server->state_.get(), options.token);
  server->job_service_ =
      std::make_unique<internal::JobServiceImpl>(server->state_.get(), options.token);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Exactly this address: no SO_REUSEPORT, so a second coordinator on the port fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.bind_address, credentials, &server->port_);
  builder.RegisterService(server->coordinator_service_.get());
  builder.RegisterService(server->job_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->server_.reset();
    return UnavailableError("coordinator: cannot listen on " + options.bind_address +
                            " (address in use, or not an address of this host?)");
  }
  server->address_ = WithPort(options.bind_address, server->port_);
  server->ticker_ = std::thread(&CoordinatorServer::TickLoop, server.get(), options.tick_interval);
  DS_LOG_INFO("coord", "coordinator of job '{}' listening on {} ({}), {} nodes expected",
              options.config.job.job_id, server->address_,
              options.tls.cert_path.empty() ? "plaintext" : "TLS", options.config.nodes.size());
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

StatusOr<JobOutcome> CoordinatorServer::WaitForEnd(std::chrono::milliseconds timeout) {
  return state_->WaitForEnd(timeout);
}

void CoordinatorServer::TickLoop(std::chrono::milliseconds interval) {
  pthread_setname_np(pthread_self(), "ds-coord-tick");
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    state_->Tick();
    lock.lock();
  }
}

void CoordinatorServer::Shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (state_ != nullptr) state_->Close();
  if (server_ != nullptr) {
    if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
    DS_LOG_INFO("coord", "coordinator on {} stopped", address_);
  }
}

}  // namespace ds::launcher
