#include "launcher/coordinator/grpc_util.h"

#include <catch2/catch.hpp>

namespace ds::launcher {
namespace {

TEST_CASE("grpc_util: status codes keep their numbers", "[coordinator]") {
  CHECK(ToGrpc(OkStatus()).ok());
  grpc::Status wire = ToGrpc(UnauthenticatedError("wrong job token"));
  CHECK(wire.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  Status back = FromGrpc(wire, "Status(127.0.0.1:4000)");
  CHECK(back.code() == StatusCode::kUnauthenticated);
  CHECK(back.message() == "Status(127.0.0.1:4000): wrong job token");
  CHECK(FromGrpc(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x"), "Join(a)").code() ==
        StatusCode::kDeadlineExceeded);
}

TEST_CASE("grpc_util: constant-time token comparison", "[coordinator]") {
  CHECK(ConstantTimeEquals("secret", "secret"));
  CHECK_FALSE(ConstantTimeEquals("secret", "secreT"));
  CHECK_FALSE(ConstantTimeEquals("secret", "secret2"));
  CHECK_FALSE(ConstantTimeEquals("secret", "secre"));
  CHECK_FALSE(ConstantTimeEquals("", "secret"));
  CHECK(ConstantTimeEquals("", ""));
}

TEST_CASE("grpc_util: the host of a peer address", "[coordinator]") {
  CHECK(PeerHost("ipv4:10.0.0.2:5123") == "10.0.0.2");
  CHECK(PeerHost("ipv6:[::1]:5123") == "::1");
  CHECK(PeerHost("ipv6:%5B::1%5D:5123") == "::1");
  CHECK(PeerHost("ipv6:[fe80::1%25eth0]:80") == "fe80::1%25eth0");
}

}  // namespace
}  // namespace ds::launcher
