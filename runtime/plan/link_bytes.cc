#include "runtime/plan/link_bytes.h"

#include <algorithm>
#include <cstdio>

#include "runtime/plan/plan_summary.h"
#include "runtime/plan/zeropp_summary.h"

namespace ds::plan {
namespace {

void Add(int64_t bytes, bool across, LinkBytes* b) { (across ? b->inter : b->intra) += bytes; }

}  // namespace

LinkBytes RankLinkBytes(const proto::Plan& plan, int rank, const std::vector<int>& node_of) {
  LinkBytes b;
  const proto::RankPlan* mine = nullptr;
  for (const proto::RankPlan& rp : plan.ranks())
    if (rp.rank() == rank) mine = &rp;
  if (!mine) return b;
  auto node = [&](int r) { return r < static_cast<int>(node_of.size()) ? node_of[r] : -1; };
  for (const proto::Instruction& ins : mine->instructions()) {
    const int64_t sent = CollectiveSentBytes(plan, ins, rank);
    if (sent == 0) continue;
    if (ins.kind() == proto::Instruction::SEND) {
      Add(sent, node(ins.collective().peer()) != node(rank), &b);
      continue;
    }
    if (ins.collective().hierarchy_size() > 0) {  // qgZ: each stage's all-to-all
      for (const StageSends& s : HierarchySends(plan, ins))
        for (int m : s.members)
          if (m != rank) Add(s.per_peer, node(m) != node(rank), &b);
      continue;
    }
    const std::vector<int> members = CollectiveMembers(plan, ins);
    const auto at = std::find(members.begin(), members.end(), rank);
    if (at == members.end() || members.size() < 2) continue;
    if (ins.kind() == proto::Instruction::ACT_ALL_TO_ALL) {  // an equal share to every other
      for (int m : members)
        if (m != rank)
          Add(sent / static_cast<int64_t>(members.size() - 1), node(m) != node(rank), &b);
      continue;
    }
    const size_t next = (static_cast<size_t>(at - members.begin()) + 1) % members.size();
    Add(sent, node(members[next]) != node(rank), &b);
  }
  return b;
}

void AddLinkClasses(const proto::Plan& plan, const std::vector<int>& node_of,
                    proto::PlanSummary* summary) {
  for (proto::RankSummary& r : *summary->mutable_ranks()) {
    const LinkBytes b = RankLinkBytes(plan, r.rank(), node_of);
    r.set_intra_node_sent_bytes(b.intra);
    r.set_inter_node_sent_bytes(b.inter);
  }
  int nodes = 0;
  for (int n : node_of) nodes = std::max(nodes, n + 1);
  summary->set_nodes(nodes);
}

std::string FormatLinkClasses(const proto::PlanSummary& summary) {
  if (summary.nodes() == 0) return "";
  auto mib = [](int64_t b) { return b / 1048576.0; };
  char line[160];
  std::snprintf(line, sizeof line, "\nsent per step by link class (%d nodes)%12s %14s\n",
                summary.nodes(), "inside MiB", "between MiB");
  std::string out = line;
  for (const proto::RankSummary& r : summary.ranks()) {
    std::snprintf(line, sizeof line, "  rank %-30d%12.2f %14.2f\n", r.rank(),
                  mib(r.intra_node_sent_bytes()), mib(r.inter_node_sent_bytes()));
    out += line;
  }
  return out;
}

}  // namespace ds::plan
