#include "launcher/coordinator/grpc_util.h"

#include <chrono>

#include "runtime/base/logging.h"

namespace ds::launcher {

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

Status FromGrpc(const grpc::Status& status, const std::string& prefix) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message())
      .WithPrefix(prefix);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Compare over the longer length so a prefix of the token takes as long as a miss.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

grpc::Status CheckToken(const grpc::ServerContextBase* context, const std::string& token,
                        const char* method) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it == metadata.end()) {
    DS_LOG_WARN("coord", "refused {} from {}: no job token", method, context->peer());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        std::string("no job token (metadata ") + kTokenMetadataKey + ")");
  }
  if (!ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()), token)) {
    DS_LOG_WARN("coord", "refused {} from {}: wrong job token", method, context->peer());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong job token");
  }
  return grpc::Status::OK;
}

std::string PeerHost(const std::string& peer) {
  std::string rest = peer;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (rest.rfind(scheme, 0) == 0) rest = rest.substr(5);
  }
  for (auto [from, to] : {std::pair<const char*, char>{"%5B", '['}, {"%5D", ']'}}) {
    for (size_t pos; (pos = rest.find(from)) != std::string::npos;) rest.replace(pos, 3, 1, to);
  }
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    return close == std::string::npos ? rest : rest.substr(1, close - 1);
  }
  size_t colon = rest.rfind(':');
  return colon == std::string::npos ? rest : rest.substr(0, colon);
}

WaitOptions WaitOptionsFor(const grpc::ServerContextBase* context) {
  WaitOptions wait;
  const auto deadline = context->deadline();
  const auto now = std::chrono::system_clock::now();
  // No deadline is system_clock's max; anything over a day away counts as none.
  if (deadline < now + std::chrono::hours(24)) {
    wait.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline - now);
  }
  wait.cancelled = [context] { return context->IsCancelled(); };
  return wait;
}

}  // namespace ds::launcher
