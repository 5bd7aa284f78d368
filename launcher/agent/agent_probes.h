// An agent's part of the link probes `parallel: auto` runs at launch (the launcher's part and
// the keys: launcher/launch/link_probes.h, launcher/state_store/link_probe.h). Before joining the
// first round the agent says where its store answers probes, probes its own store (the link
// between ranks of one node) and, once every node has, the next node's store in the launcher's
// ring (the link between nodes), and puts each result into the coordinator's KV store. What it
// cannot measure it reports as an error value, so the launcher stops with this node's reason.
//
//   AgentProbes p{"10.0.0.2", "10.0.0.2:7000", token, std::chrono::seconds(120)};
//   Status s = RunAgentProbes(client, p);   // then Join as usual
#pragma once

#include <chrono>
#include <string>

#include "launcher/coordinator/coordinator_client.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct AgentProbes {
  std::string node_name;
  std::string store;  // host:port of this node's store server as other nodes reach it; "" = none
  std::string token;
  std::chrono::milliseconds timeout{120000};  // each wait for the launcher or the other agents
  Status store_error;                         // why there is no store (when `store` is empty)
};

Status RunAgentProbes(CoordinatorClient* client, const AgentProbes& p);

// This machine's address on the route to `host_port` (a connected UDP socket's local address,
// no packet sent): what other nodes reach this one at when no address is advertised.
StatusOr<std::string> LocalAddressToward(const std::string& host_port);

}  // namespace ds::launcher
