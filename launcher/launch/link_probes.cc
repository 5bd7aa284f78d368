#include "launcher/launch/link_probes.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "runtime/base/status_macros.h"

namespace ds::launcher {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A wait's bounds: the protocol's timeout (and a little more in real time), or the caller's
// cancellation.
struct Bounds {
  std::chrono::milliseconds timeout;
  std::function<bool()> cancelled;
  WaitOptions Wait() const {
    WaitOptions w;
    w.deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
    w.cancelled = cancelled;
    return w;
  }
};

// The value at each key (all set: waited for), decoded; errors name the node.
template <typename T, typename Decode>
StatusOr<std::vector<T>> ReadAll(CoordinatorState* state, const std::vector<NodeSpec>& nodes,
                                 std::string (*key)(const std::string&), Decode decode,
                                 const Bounds& b) {
  std::vector<std::string> keys;
  for (const NodeSpec& n : nodes) keys.push_back(key(n.name));
  DS_RETURN_IF_ERROR(state->KvWait(0, keys, b.timeout, b.Wait()));
  std::vector<T> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    DS_ASSIGN_OR_RETURN(const std::string v,
                        state->KvGet(0, keys[i], std::chrono::milliseconds(0), b.Wait()));
    StatusOr<T> d = decode(v);
    if (!d.ok()) return d.status().WithPrefix("node " + nodes[i].name);
    out.push_back(*std::move(d));
  }
  return out;
}

planner::LinkRate MedianRate(const std::vector<LinkSample>& s) {
  std::vector<double> lat, bw;
  for (const LinkSample& x : s) {
    lat.push_back(x.latency_us);
    bw.push_back(x.gbps);
  }
  planner::LinkRate r;
  r.latency_us = Median(lat);
  r.gbps = Median(bw);
  return r;
}

planner::LinkRate SlowestRate(const std::vector<LinkSample>& s) {
  planner::LinkRate r;
  r.latency_us = 0;
  r.gbps = 1e30;
  for (const LinkSample& x : s) {
    r.latency_us = std::max(r.latency_us, x.latency_us);
    r.gbps = std::min(r.gbps, x.gbps);
  }
  return r;
}

}  // namespace

StatusOr<MeasuredLinks> MeasureLinks(CoordinatorState* state, const std::vector<NodeSpec>& nodes,
                                     std::chrono::milliseconds timeout,
                                     std::function<bool()> cancelled) {
  const Bounds b{timeout, std::move(cancelled)};
  MeasuredLinks m;
  auto probe = [&]() -> Status {
    DS_ASSIGN_OR_RETURN(std::vector<std::string> stores,
                        ReadAll<std::string>(state, nodes, link_keys::At, DecodeLinkValue, b));
    std::vector<std::pair<std::string, std::string>> ring;
    for (size_t i = 0; i < nodes.size(); ++i) {
      ring.push_back({nodes[i].name, stores[i]});
      m.nodes.push_back(nodes[i].name);
    }
    DS_RETURN_IF_ERROR(state->KvSet(0, link_keys::kRing, EncodeRing(ring)));
    DS_ASSIGN_OR_RETURN(m.intra,
                        ReadAll<LinkSample>(state, nodes, link_keys::Intra, DecodeLinkSample, b));
    m.intra_rate = MedianRate(m.intra);
    if (nodes.size() < 2) return OkStatus();
    DS_ASSIGN_OR_RETURN(m.inter,
                        ReadAll<LinkSample>(state, nodes, link_keys::Inter, DecodeLinkSample, b));
    m.inter_rate = SlowestRate(m.inter);
    // The ranks of a node send across at once (every data-parallel ring, every pipeline
    // boundary of the planner's layouts): each has its share of the node's link.
    int slots = 1;
    for (const NodeSpec& n : nodes) slots = std::max(slots, n.slots);
    m.inter_rate.gbps /= slots;
    m.ranks_per_link = slots;
    return OkStatus();
  };
  DS_RETURN_IF_ERROR(probe().WithPrefix("link probes"));
  return m;
}

std::string FormatMeasuredLinks(const MeasuredLinks& m) {
  std::string out =
      "ds-launch: parallel: auto: the links, measured through the agents (a ping "
      "median, then a timed transfer):\n";
  size_t w = 4;
  for (const std::string& n : m.nodes) w = std::max(w, n.size());
  out += fmt::format("  {:<{}}  {:<38}  {}\n", "node", w, "inside the node", "to the next node");
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const std::string inter = m.inter.empty()
                                  ? "-"
                                  : fmt::format("-> {}: {}", m.nodes[(i + 1) % m.nodes.size()],
                                                DescribeLinkSample(m.inter[i]));
    out +=
        fmt::format("  {:<{}}  {:<38}  {}\n", m.nodes[i], w, DescribeLinkSample(m.intra[i]), inter);
  }
  LinkSample intra{m.intra_rate.latency_us, m.intra_rate.gbps, 0, 0};
  out += "  measured inside a node (median): " + DescribeLinkSample(intra);
  if (!m.inter.empty()) {
    LinkSample inter{m.inter_rate.latency_us, m.inter_rate.gbps, 0, 0};
    out += "; between nodes (the slowest link";
    if (m.ranks_per_link > 1) out += fmt::format(", shared by a node's {} ranks", m.ranks_per_link);
    out += "): " + DescribeLinkSample(inter);
  }
  return out + "\n";
}

}  // namespace ds::launcher
