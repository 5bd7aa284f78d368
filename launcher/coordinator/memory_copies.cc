#include "launcher/coordinator/memory_copies.h"

#include <map>
#include <set>

namespace ds::launcher {
namespace {

std::string StoreOf(const RoundMember& m, const std::string& host) {
  if (m.state_store_port <= 0) return "";
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(m.state_store_port);
}

// "2, 3 and 5 more" style list of at most 8 ranks.
std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += " and " + std::to_string(ranks.size() - 8) + " more";
  return out;
}

}  // namespace

CopyPlacement PlaceCopies(const std::vector<RoundMember>& members,
                          const std::vector<std::string>& addresses, int old_world, int world) {
  CopyPlacement p;
  const int copies_world = old_world > 0 ? old_world : world;
  const int n = static_cast<int>(members.size());
  std::vector<std::string> store(n);
  for (int i = 0; i < n; ++i) store[i] = StoreOf(members[i], addresses[i]);
  p.stores.resize(n);
  for (int i = 0; i < n; ++i) {
    const int buddy = (i + 1) % n;
    if (buddy != i && !store[buddy].empty()) p.stores[i].push_back(store[buddy]);
  }
  // step -> rank -> the members holding that copy
  std::map<int64_t, std::map<int, std::vector<int>>> held;
  bool any = false;
  for (int i = 0; i < n; ++i)
    for (const StoredCopy& c : members[i].held_copies)
      if (c.rank >= 0 && c.rank < copies_world && !store[i].empty()) {
        held[c.step][c.rank].push_back(i);
        any = true;
      }
  if (!any) return p;
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    if (static_cast<int>(it->second.size()) < copies_world) continue;
    p.step = it->first;
    p.copies_world = copies_world;
    p.sources.assign(copies_world, "");
    for (const auto& [rank, holders] : it->second) {
      int pick = holders.front();
      for (int h : holders)
        if (rank >= members[h].first_rank && rank < members[h].first_rank + members[h].slots)
          pick = h;  // its own node's copy: no network
      p.sources[rank] = store[pick];
    }
    p.summary = "resuming from the in-memory copies of step " + std::to_string(p.step) +
                (copies_world == world
                     ? " (every rank's copy is held by an agent)"
                     : " (the " + std::to_string(copies_world) +
                           " ranks' copies, cut for a world of " + std::to_string(world) + ")");
    return p;
  }
  const auto newest = held.rbegin();
  std::vector<int> missing;
  for (int r = 0; r < copies_world; ++r)
    if (!newest->second.count(r)) missing.push_back(r);
  p.summary = "no step has an in-memory copy of every rank (step " + std::to_string(newest->first) +
              " lacks rank(s) " + RankList(missing) +
              "): the ranks resume from the disk checkpoint, or from step 0 without one";
  return p;
}

}  // namespace ds::launcher
