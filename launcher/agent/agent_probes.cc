#include "launcher/agent/agent_probes.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "launcher/state_store/copy_client.h"
#include "launcher/state_store/link_probe.h"
#include "runtime/base/logging.h"
#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

// Probes `store` and puts the sample (or why not) at `key`; `latency_us` >= 0: the pings were
// made before, only the transfer is left.
Status ProbeInto(CoordinatorClient* client, const AgentProbes& p, const std::string& store,
                 const std::string& key, const char* what, double latency_us = -1) {
  ProbeBudget budget;
  budget.latency = latency_us < 0;
  StatusOr<LinkSample> s = CopyClient(store, p.token).Probe(budget, p.timeout);
  if (s.ok() && latency_us >= 0) s->latency_us = latency_us;
  DS_RETURN_IF_ERROR(
      client->KvSet(0, key, s.ok() ? EncodeLinkSample(*s) : EncodeLinkError(s.status())));
  if (!s.ok()) return s.status();
  DS_LOG_INFO("agent", "link probe {} ({}): {}", what, store, DescribeLinkSample(*s));
  return OkStatus();
}

Status Probe(CoordinatorClient* client, const AgentProbes& p) {
  DS_RETURN_IF_ERROR(client->KvSet(0, link_keys::At(p.node_name), p.store));
  DS_ASSIGN_OR_RETURN(const std::string text, client->KvGet(0, link_keys::kRing, p.timeout));
  DS_ASSIGN_OR_RETURN(const auto ring, DecodeRing(text));
  const auto me =
      std::find_if(ring.begin(), ring.end(), [&](const auto& n) { return n.first == p.node_name; });
  if (me == ring.end()) return NotFoundError("this node is not in the launcher's probe ring");
  DS_RETURN_IF_ERROR(
      ProbeInto(client, p, p.store, link_keys::Intra(p.node_name), "inside this node"));
  if (ring.size() < 2) return OkStatus();
  std::vector<std::string> intra, pinged;  // every node's own probe done: the links are quiet
  for (const auto& n : ring) {
    intra.push_back(link_keys::Intra(n.first));
    pinged.push_back(link_keys::Pinged(n.first));
  }
  DS_RETURN_IF_ERROR(client->KvWait(0, intra, p.timeout));
  const auto& next = ring[(me - ring.begin() + 1) % ring.size()];
  ProbeBudget pings;
  pings.bandwidth = false;
  DS_ASSIGN_OR_RETURN(const LinkSample ping,
                      CopyClient(next.second, p.token).Probe(pings, p.timeout));
  DS_RETURN_IF_ERROR(client->KvSet(0, link_keys::Pinged(p.node_name), "done"));
  DS_RETURN_IF_ERROR(client->KvWait(0, pinged, p.timeout));  // then every link carries a transfer
  return ProbeInto(client, p, next.second, link_keys::Inter(p.node_name),
                   ("to node " + next.first).c_str(), ping.latency_us);
}

}  // namespace

Status RunAgentProbes(CoordinatorClient* client, const AgentProbes& p) {
  if (p.store.empty()) {
    const Status why = p.store_error.ok() ? UnavailableError("no store server") : p.store_error;
    client->KvSet(0, link_keys::At(p.node_name), EncodeLinkError(why)).IgnoreError();
    return why.WithPrefix("link probes");
  }
  Status s = Probe(client, p);
  if (!s.ok()) {  // whatever this node still owes says why (best effort)
    for (const std::string& key : {link_keys::Intra(p.node_name), link_keys::Pinged(p.node_name),
                                   link_keys::Inter(p.node_name)})
      client->KvSet(0, key, EncodeLinkError(s)).IgnoreError();
    return s.WithPrefix("link probes");
  }
  return OkStatus();
}

StatusOr<std::string> LocalAddressToward(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgumentError("no port in " + host_port);
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), host_port.substr(colon + 1).c_str(), &hints, &found) != 0 || !found)
    return UnavailableError("cannot resolve " + host);
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!ok) return ErrnoToStatus(err, "the route to " + host);
  char text[INET6_ADDRSTRLEN] = {0};
  const void* a =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  inet_ntop(local.ss_family, a, text, sizeof(text));
  return local.ss_family == AF_INET6 ? "[" + std::string(text) + "]" : std::string(text);
}

}  // namespace ds::launcher
