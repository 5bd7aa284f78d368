// MeasureLinks against a coordinator's state with the agents' side played by threads: the ring
// it hands out, the rates it takes from their samples, and an agent's error named by its node.
#include "launcher/launch/link_probes.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <vector>

namespace ds::launcher {
namespace {

using std::chrono::seconds;

std::unique_ptr<CoordinatorState> State(const std::vector<NodeSpec>& nodes) {
  CoordinatorConfig config;
  config.nodes = nodes;
  config.job_pending = true;
  auto state = CoordinatorState::Create(config);
  REQUIRE(state.ok());
  return std::move(state).value();
}

WaitOptions Bounded() {
  WaitOptions w;
  w.deadline = std::chrono::steady_clock::now() + seconds(10);
  return w;
}

LinkSample Sample(double latency_us, double gbps) { return {latency_us, gbps, 1 << 20, 0.1}; }

// One agent: its store, then (after the ring) its samples, or an error in place of `at`.
void Agent(CoordinatorState* s, const std::string& node, const std::string& at, LinkSample intra,
           LinkSample inter) {
  REQUIRE(s->KvSet(0, link_keys::At(node), at).ok());
  if (at.rfind("error", 0) == 0) return;
  StatusOr<std::string> ring = s->KvGet(0, link_keys::kRing, seconds(10), Bounded());
  REQUIRE(ring.ok());
  REQUIRE(s->KvSet(0, link_keys::Intra(node), EncodeLinkSample(intra)).ok());
  REQUIRE(s->KvSet(0, link_keys::Inter(node), EncodeLinkSample(inter)).ok());
}

TEST_CASE("MeasureLinks: the ring, the nodes' samples, the rates the cost model takes",
          "[launcher][auto]") {
  const std::vector<NodeSpec> nodes = {{"a", 2}, {"b", 2}, {"c", 2}};
  auto state = State(nodes);
  std::vector<std::future<void>> agents;
  const double intra_bw[] = {3.0, 2.0, 5.0}, inter_bw[] = {0.1, 0.06, 0.12};
  for (int i = 0; i < 3; ++i)
    agents.push_back(std::async(std::launch::async, [&, i] {
      Agent(state.get(), nodes[i].name,
            "10.0.0." + std::to_string(i + 1) + ":700" + std::to_string(i),
            Sample(8 + i, intra_bw[i]), Sample(100 + 50 * i, inter_bw[i]));
    }));
  StatusOr<MeasuredLinks> m = MeasureLinks(state.get(), nodes, seconds(10));
  for (auto& a : agents) a.get();
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  StatusOr<std::string> ring = state->KvGet(0, link_keys::kRing, seconds(1), Bounded());
  REQUIRE(ring.ok());
  CHECK(*ring == "a 10.0.0.1:7000\nb 10.0.0.2:7001\nc 10.0.0.3:7002\n");
  CHECK(m->intra_rate.latency_us == Approx(9));  // the medians
  CHECK(m->intra_rate.gbps == Approx(3.0));
  CHECK(m->inter_rate.latency_us == Approx(200));  // the slowest link, shared by 2 ranks
  CHECK(m->inter_rate.gbps == Approx(0.03));
  CHECK(m->ranks_per_link == 2);
  const std::string table = FormatMeasuredLinks(*m);
  CHECK(table.find("-> c: 150.0 us, 0.060 GB/s") != std::string::npos);
  CHECK(table.find("shared by a node's 2 ranks): 200.0 us, 0.030 GB/s") != std::string::npos);
}

TEST_CASE("MeasureLinks: an agent's error names its node; a silent one times out naming its key",
          "[launcher][auto]") {
  const std::vector<NodeSpec> nodes = {{"a", 1}, {"b", 1}};
  {
    auto state = State(nodes);
    REQUIRE(state->KvSet(0, link_keys::At("a"), "10.0.0.1:7000").ok());
    REQUIRE(
        state->KvSet(0, link_keys::At("b"), EncodeLinkError(UnavailableError("no store"))).ok());
    StatusOr<MeasuredLinks> m = MeasureLinks(state.get(), nodes, seconds(10));
    REQUIRE(m.status().code() == StatusCode::kUnavailable);
    CHECK(m.status().message().find("link probes: node b") != std::string::npos);
    CHECK(m.status().message().find("no store") != std::string::npos);
  }
  auto state = State(nodes);
  REQUIRE(state->KvSet(0, link_keys::At("a"), "10.0.0.1:7000").ok());
  StatusOr<MeasuredLinks> m = MeasureLinks(state.get(), nodes, std::chrono::milliseconds(300));
  REQUIRE(m.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(m.status().message().find("links/at/b") != std::string::npos);
  // A signal to ds-launch ends the wait at once, long before the timeout.
  const auto t0 = std::chrono::steady_clock::now();
  m = MeasureLinks(state.get(), nodes, seconds(60), [] { return true; });
  CHECK(m.status().code() == StatusCode::kCancelled);
  CHECK(std::chrono::steady_clock::now() - t0 < seconds(5));
}

TEST_CASE("link_probe: samples and rings round-trip; malformed values are refused",
          "[launcher][auto]") {
  const LinkSample s{12.5, 1.25, 4 << 20, 0.0034};
  StatusOr<LinkSample> back = DecodeLinkSample(EncodeLinkSample(s));
  REQUIRE(back.ok());
  CHECK(back->latency_us == s.latency_us);
  CHECK(back->gbps == s.gbps);
  CHECK(back->bytes == s.bytes);
  CHECK(DecodeLinkSample("12 x").status().code() == StatusCode::kInvalidArgument);
  CHECK(DecodeLinkSample("error: cut").status().message() == "cut");
  StatusOr<std::vector<std::pair<std::string, std::string>>> ring =
      DecodeRing(EncodeRing({{"a", "[::1]:7000"}, {"b", "h:1"}}));
  REQUIRE(ring.ok());
  CHECK(ring->at(0).second == "[::1]:7000");
  CHECK(DecodeRing("a\n").status().code() == StatusCode::kInvalidArgument);
  CHECK(DecodeRing("").status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::launcher
