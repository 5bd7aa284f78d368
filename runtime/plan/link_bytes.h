// Which of each rank's bytes cross nodes (issue: ZeRO++ over slow links): with the nodes known
// (ds-launch plan --hostfile), every byte a rank sends in one step goes to the link class of the
// rank it goes to. Ring collectives (all-reduce, reduce-scatter, all-gather) send everything to
// the next member of the group's ring; an all-to-all sends each other member its share; a SEND
// goes to its peer. A flat ring over two nodes of k ranks therefore crosses nodes at two of its
// 2k hops, and the ranks at those hops carry the inter-node bytes.
//
//   AddLinkClasses(plan, {0, 0, 1, 1}, &summary);  // ranks 0-1 on node 0, 2-3 on node 1
#pragma once

#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace ds::plan {

struct LinkBytes {
  int64_t intra = 0;  // sent to ranks on the same node
  int64_t inter = 0;  // sent to ranks on other nodes
};

// One step of `rank`'s stream; node_of[r]: world rank r's node.
LinkBytes RankLinkBytes(const proto::Plan& plan, int rank, const std::vector<int>& node_of);

// Fills every RankSummary's intra_node_sent_bytes and inter_node_sent_bytes and the summary's
// node count.
void AddLinkClasses(const proto::Plan& plan, const std::vector<int>& node_of,
                    proto::PlanSummary* summary);

// "sent per step inside nodes / between nodes" for every rank (empty before AddLinkClasses).
std::string FormatLinkClasses(const proto::PlanSummary& summary);

}  // namespace ds::plan
