// One rendezvous round at a time, with torch's semantics (reference/launcher.md 1.1)
// run inside the coordinator: numbered rounds; the expected nodes are the hostfile's; the
// round closes at once when max_nodes joined, or `last_call` after min_nodes joined; it
// fails when the join deadline (round opened + join_timeout) passes with fewer than
// min_nodes. Node rank = hostfile order of the members (not arrival); node k's global ranks
// are the contiguous block starting at the sum of the slots of the members before it.
//
// Not thread-safe and never blocks: CoordinatorState owns one under its mutex and does the
// waiting. Times come from the caller (the injected clock).
//
//   Rendezvous rdzv(config);
//   rdzv.Open(1, now);
//   DS_ASSIGN_OR_RETURN(uint64_t ticket, rdzv.Join(index, request, now));
//   rdzv.Evaluate(now);  // closes or fails the round when its windows say so
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "launcher/coordinator/clock.h"
#include "launcher/coordinator/coordinator_types.h"
#include "runtime/base/status.h"

namespace ds::launcher {

struct RendezvousConfig {
  std::vector<NodeSpec> nodes;  // hostfile order; names unique
  int min_nodes = 0;            // 1 <= min_nodes <= max_nodes
  int max_nodes = 0;            // <= nodes.size()
  std::chrono::milliseconds join_timeout{600000};
  std::chrono::milliseconds last_call{30000};
};

// A node of a closed round.
struct RoundMember {
  int node_index = 0;  // into RendezvousConfig::nodes
  int node_rank = 0;
  int first_rank = 0;  // global rank of local rank 0
  int slots = 0;
  std::string advertise_addr;
  int state_store_port = 0;             // its agent's state store (0 = none)
  std::vector<StoredCopy> held_copies;  // the in-memory copies it holds
};

class Rendezvous {
 public:
  explicit Rendezvous(RendezvousConfig config) : config_(std::move(config)) {}

  // Opens round `number` (> the previous one) at `now`, with nobody joined.
  void Open(int number, SteadyTime now);

  int round() const { return round_; }
  bool closed() const { return closed_; }
  // Not OK once the round failed (join deadline passed below min_nodes).
  const Status& error() const { return error_; }

  // Index of `name` in the hostfile, or -1.
  int NodeIndex(const std::string& name) const;

  // Adds node `node_index` to the open round (a second Join of the same node replaces the
  // first). Returns a ticket for Leave(). FailedPrecondition naming the current round when
  // `request.round` is older or newer than the current one or the round is closed;
  // InvalidArgument when the slots disagree with the hostfile. Does not close the round:
  // call Evaluate().
  StatusOr<uint64_t> Join(int node_index, const JoinRequest& request, SteadyTime now);
  // Takes the node out of the open round if `ticket` is its latest Join (its caller gave up).
  void Leave(int node_index, uint64_t ticket, SteadyTime now);
  // Applies the windows at `now`; returns true when the round closed or failed just now.
  bool Evaluate(SteadyTime now);
  // A node whose agent went silent (the coordinator's node_timeout): later rounds no longer wait
  // for it, and close once every other node joined (elastic jobs: min_nodes < max_nodes), until
  // it joins again.
  void MarkLost(int node_index) { lost_.insert(node_index); }
  // A member of the last round, alive when this one opened: the last call does not close the
  // round before it joins, unless it is marked lost (its agent stopping its workers takes up to
  // their grace period, which may be longer than the last call). Cleared by Open().
  void Expect(int node_index) { expected_.insert(node_index); }
  // Expected nodes that have not joined and are not lost, in hostfile order.
  std::vector<int> Awaited() const;

  // Of the closed round, in node-rank order; empty before it closes.
  const std::vector<RoundMember>& members() const { return members_; }
  const RoundMember* FindMember(int node_index) const;
  int world_size() const { return world_size_; }
  SteadyTime opened_at() const { return opened_at_; }
  SteadyTime closed_at() const { return closed_at_; }
  bool HasJoined(int node_index) const { return joined_.count(node_index) > 0; }
  // "missing: b, c", preceded by "at least 2 needed, " when min_nodes < max_nodes.
  std::string Describe() const;

 private:
  struct Joined {
    JoinRequest request;
    int slots = 0;
    uint64_t ticket = 0;
  };
  void Close(SteadyTime now);

  const RendezvousConfig config_;
  int round_ = 0;
  SteadyTime opened_at_;
  SteadyTime closed_at_;
  bool last_call_started_ = false;
  SteadyTime last_call_deadline_;
  bool closed_ = false;
  Status error_;
  uint64_t next_ticket_ = 1;
  std::map<int, Joined> joined_;  // by hostfile index, so iteration is hostfile order
  std::vector<RoundMember> members_;
  std::set<int> lost_;      // node indexes
  std::set<int> expected_;  // node indexes (Expect)
  int world_size_ = 0;
};

// "12.0 s"
std::string FormatSeconds(std::chrono::milliseconds d);

}  // namespace ds::launcher
