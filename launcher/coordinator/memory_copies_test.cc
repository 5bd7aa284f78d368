// PlaceCopies: each node sends to its own store and the next node's; a restart resumes from the
// newest step every rank has a copy of, read from the rank's own node where it can be.
#include "launcher/coordinator/memory_copies.h"

#include <catch2/catch.hpp>

namespace ds::launcher {
namespace {

RoundMember Member(int node_rank, int first_rank, int slots, int port,
                   std::vector<StoredCopy> held = {}) {
  RoundMember m;
  m.node_index = node_rank;
  m.node_rank = node_rank;
  m.first_rank = first_rank;
  m.slots = slots;
  m.state_store_port = port;
  m.held_copies = std::move(held);
  return m;
}

const std::vector<std::string> kHosts = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};

TEST_CASE("every node sends to the next node's agent (wrapping)") {
  const CopyPlacement p = PlaceCopies(
      {Member(0, 0, 2, 7000), Member(1, 2, 2, 7001), Member(2, 4, 2, 7002)}, kHosts, 0, 6);
  REQUIRE(p.stores.size() == 3);
  CHECK(p.stores[0] == std::vector<std::string>{"10.0.0.2:7001"});
  CHECK(p.stores[1] == std::vector<std::string>{"10.0.0.3:7002"});
  CHECK(p.stores[2] == std::vector<std::string>{"10.0.0.1:7000"});
  CHECK(p.step == 0);  // nothing held: a first round
  CHECK(p.summary.empty());
}

TEST_CASE("one node: no other agent; a node without a store is skipped") {
  CHECK(PlaceCopies({Member(0, 0, 4, 7000)}, kHosts, 0, 4).stores[0].empty());
  const CopyPlacement p = PlaceCopies({Member(0, 0, 2, 0), Member(1, 2, 2, 7001)}, kHosts, 4, 4);
  CHECK(p.stores[0] == std::vector<std::string>{"10.0.0.2:7001"});
  CHECK(p.stores[1].empty());
  CHECK(PlaceCopies({Member(0, 0, 1, 7000), Member(1, 1, 1, 7001)}, {"::1", "::2"}, 0, 2)
            .stores[1][0] == "[::1]:7000");
}

TEST_CASE("the newest step every rank has a copy of, from the rank's own node first") {
  // Node 0 (ranks 0, 1) holds its own copies of steps 4 and 5 and node 1's of step 4; node 1
  // (ranks 2, 3) holds its own of 4 and 5 and node 0's of 4 and 5. Rank 2's step-5 copy is missing
  // from both: step 5 is incomplete, step 4 is chosen.
  const std::vector<StoredCopy> node0 = {{0, 4}, {0, 5}, {1, 4}, {1, 5}, {2, 4}, {3, 4}};
  const std::vector<StoredCopy> node1 = {{2, 4}, {3, 4}, {3, 5}, {0, 4}, {0, 5}, {1, 4}, {1, 5}};
  const CopyPlacement p =
      PlaceCopies({Member(0, 0, 2, 7000, node0), Member(1, 2, 2, 7001, node1)}, kHosts, 4, 4);
  CHECK(p.step == 4);
  CHECK(p.sources == std::vector<std::string>{"10.0.0.1:7000", "10.0.0.1:7000", "10.0.0.2:7001",
                                              "10.0.0.2:7001"});
  CHECK(p.summary.find("step 4") != std::string::npos);
}

TEST_CASE("a lost node's ranks read their buddy's copies; none complete falls back to disk") {
  // An elastic job lost node 1: the new round is node 0 alone, 2 ranks; it holds node 1's old
  // copies too (its buddy's), so all 4 old ranks' copies of step 6 are there to cut from.
  const std::vector<StoredCopy> survivor = {{0, 6}, {1, 6}, {2, 6}, {3, 6}, {0, 5}};
  const CopyPlacement p = PlaceCopies({Member(0, 0, 2, 7000, survivor)}, kHosts, 4, 2);
  CHECK(p.step == 6);
  CHECK(p.copies_world == 4);
  REQUIRE(p.sources.size() == 4);
  CHECK(p.sources[3] == "10.0.0.1:7000");
  CHECK(p.summary.find("the 4 ranks' copies, cut for a world of 2") != std::string::npos);
  // Rank 3's copies were all on the lost node.
  const CopyPlacement q =
      PlaceCopies({Member(0, 0, 2, 7000, {{0, 6}, {1, 6}, {2, 6}})}, kHosts, 4, 2);
  CHECK(q.step == 0);
  CHECK(q.summary.find("step 6 lacks rank(s) 3") != std::string::npos);
  CHECK(q.summary.find("disk checkpoint") != std::string::npos);
}

}  // namespace
}  // namespace ds::launcher
