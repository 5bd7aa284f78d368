// Link probes: how fast one node's agent reaches another's (or its own) store server, measured
// at launch for `parallel: auto`'s cost model (launcher/launch/link_probes.h). A probe is one
// more request of the copy store's wire (copy_server.h: op PROBE, with the job token), so every
// agent answers probes on the port it already advertises; no other listener is opened.
//
// After the server's OK reply the client sends 9-byte commands (u8 command, u64 little-endian
// count): 1 = ping (the server answers one byte), 2 = sink (the server reads `count` bytes and
// answers the u64 count it read), 0 = done. The client times a few pings (latency: half the
// median round trip) and then one sink sized from a 1 MiB warm-up to last about `bulk_time`
// (bandwidth: its bytes over the time until the server's answer).
//
//   CopyClient peer("10.0.0.2:7000", token);
//   DS_ASSIGN_OR_RETURN(LinkSample s, peer.Probe(ProbeBudget{}, std::chrono::seconds(10)));
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launcher/state_store/copy_wire.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct ProbeBudget {
  int pings = 16;
  int64_t max_bytes = int64_t{256} << 20;    // the sink's ceiling
  std::chrono::milliseconds bulk_time{250};  // what the sink aims to last
  bool latency = true, bandwidth = true;     // the pings, the sink
};

struct LinkSample {
  double latency_us = 0;  // one way: half the median ping round trip
  double gbps = 0;        // GB/s (1e9 bytes per second) of the sink
  int64_t bytes = 0;      // the sink's bytes
  double seconds = 0;     // the sink's time
};

// "12.3 us, 1.234 GB/s (9.87 Gbit/s)".
std::string DescribeLinkSample(const LinkSample& s);

// How the agents and the launcher exchange the probes through the coordinator's KV store (the
// current round), agents first:
//   At(node)     an agent: the host:port its store answers probes on
//   kRing        the launcher, once every node is At: "name host:port" a line, in node order
//   Intra(node)  an agent: its probe of its own store (the link between ranks of one node);
//                then, once every node's Intra is set, when there are 2+ nodes:
//   Pinged(node) its pings of the next node's store in the ring (the last node's: the first's)
//                are done; once every node's are (no ping waits behind another node's
//                transfer in a queue of the link):
//   Inter(node)  its probe of the next node: those pings' latency, a transfer's bandwidth
// A value an agent cannot give is "error: why" (EncodeLinkError), so the launcher stops at once
// with the node's reason instead of waiting out its timeout.
namespace link_keys {
inline constexpr char kRing[] = "links/ring";
std::string At(const std::string& node);
std::string Intra(const std::string& node);
std::string Pinged(const std::string& node);
std::string Inter(const std::string& node);
}  // namespace link_keys
std::string EncodeLinkSample(const LinkSample& s);  // "latency_us gbps bytes seconds"
std::string EncodeLinkError(const Status& why);
// The sample, or the agent's error (Unavailable with its reason); InvalidArgument when malformed.
StatusOr<LinkSample> DecodeLinkSample(const std::string& value);
// "error: why" as an error, else the value itself (an At key's address).
StatusOr<std::string> DecodeLinkValue(const std::string& value);
std::string EncodeRing(const std::vector<std::pair<std::string, std::string>>& nodes);
StatusOr<std::vector<std::pair<std::string, std::string>>> DecodeRing(const std::string& text);

namespace copy_wire {

inline constexpr int64_t kMaxSinkBytes = int64_t{1} << 30;

// The server's side once the PROBE request is accepted (its OK reply sent): answers commands
// until done or the connection ends.
Status ServeProbe(Conn& io);
// The client's side once the server's OK reply is read.
StatusOr<LinkSample> RunProbe(Conn& io, const ProbeBudget& budget);

}  // namespace copy_wire
}  // namespace ds::launcher
