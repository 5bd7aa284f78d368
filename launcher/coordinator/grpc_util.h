// gRPC glue shared by the coordinator's server and client (package-internal): status
// conversion (same code numbers, so a cast), the job-token metadata key and its
// constant-time check, peer-address parsing and the WaitOptions of a server call.
// Pure functions, thread-safe.
//
//   if (grpc::Status denied = CheckToken(ctx, token, "Join"); !denied.ok()) return denied;
//   return ToGrpc(state->Join(request, WaitOptionsFor(ctx)).status());
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "launcher/coordinator/coordinator_state.h"
#include "runtime/base/status.h"

namespace ds::launcher {

// Metadata key of the job token on every call.
inline constexpr char kTokenMetadataKey[] = "ds-job-token";

grpc::Status ToGrpc(const Status& status);
// Keeps the code; the message becomes "<prefix>: <message>" (prefix e.g. "Join(host:port)").
Status FromGrpc(const grpc::Status& status, const std::string& prefix);

// True when a == b; the time taken depends only on the lengths, not on the contents.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// OK when the call carries `token` under kTokenMetadataKey; otherwise UNAUTHENTICATED,
// logging one warning with the peer address and `method`.
grpc::Status CheckToken(const grpc::ServerContextBase* context, const std::string& token,
                        const char* method);

// "ipv4:10.0.0.2:5123" -> "10.0.0.2"; "ipv6:[::1]:5123" (or %5B::1%5D) -> "::1".
std::string PeerHost(const std::string& peer);

// The caller's deadline (steady clock) and cancellation, for blocking state calls.
WaitOptions WaitOptionsFor(const grpc::ServerContextBase* context);

}  // namespace ds::launcher
