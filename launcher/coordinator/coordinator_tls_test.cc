// TLS between CoordinatorClient and CoordinatorServer. The PEM files in testdata/ are a
// throwaway CA, a server certificate for localhost / 127.0.0.1 and a client certificate,
// valid for 100 years (made with `openssl req -x509` and `openssl x509 -req`).
#include <catch2/catch.hpp>

#include "launcher/coordinator/coordinator_client.h"
#include "launcher/coordinator/coordinator_server.h"

namespace ds::launcher {
namespace {

constexpr char kDir[] = "launcher/coordinator/testdata/";

std::string Pem(const char* name) { return std::string(kDir) + name; }

std::unique_ptr<CoordinatorServer> StartTls(bool require_client_cert) {
  CoordinatorOptions options;
  options.bind_address = "127.0.0.1:0";
  options.token = "tls-token";
  options.config.nodes = {{"a", 1}};
  options.tls.cert_path = Pem("server.pem");
  options.tls.key_path = Pem("server-key.pem");
  if (require_client_cert) options.tls.client_ca_path = Pem("ca.pem");
  StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  REQUIRE(server.ok());
  return std::move(server).value();
}

Status Probe(const CoordinatorServer& server, bool tls, bool client_cert) {
  ClientOptions options;
  options.address = server.address();
  options.token = "tls-token";
  options.rpc_timeout = std::chrono::seconds(5);
  if (tls) options.tls_ca_path = Pem("ca.pem");
  if (client_cert) {
    options.tls_cert_path = Pem("client.pem");
    options.tls_key_path = Pem("client-key.pem");
  }
  StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Create(options);
  REQUIRE(client.ok());
  return (*client)->GetStatus().status();
}

TEST_CASE("CoordinatorServer: TLS with and without client certificates", "[coordinator][tls]") {
  SECTION("server certificate only") {
    auto server = StartTls(/*require_client_cert=*/false);
    CHECK(Probe(*server, /*tls=*/true, /*client_cert=*/false).ok());
    CHECK(Probe(*server, /*tls=*/false, false).code() == StatusCode::kUnavailable);
  }
  SECTION("client certificates required") {
    auto server = StartTls(/*require_client_cert=*/true);
    CHECK(Probe(*server, true, /*client_cert=*/true).ok());
    CHECK_FALSE(Probe(*server, true, /*client_cert=*/false).ok());
  }
  SECTION("unreadable files are errors naming them") {
    CoordinatorOptions options;
    options.token = "t";
    options.config.nodes = {{"a", 1}};
    options.tls.cert_path = Pem("missing.pem");
    options.tls.key_path = Pem("server-key.pem");
    StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    CHECK(server.status().code() == StatusCode::kNotFound);
    CHECK_THAT(server.status().message(), Catch::Contains("missing.pem"));
  }
}

}  // namespace
}  // namespace ds::launcher
