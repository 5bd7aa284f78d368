#include "runtime/plan/collective_check.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"

namespace ds::plan {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

// "REDUCE_SCATTER of 1024 DT_BF16 elements [256 256 256 256] (bucket 3)".
std::string Describe(const Ins& ins) {
  const proto::Collective& c = ins.collective();
  std::string s = Ins::Kind_Name(ins.kind()) + " of " + Str(c.count()) + " " +
                  proto::DataType_Name(c.dtype()) + " elements";
  if (c.rank_counts_size() > 0) {
    s += " [";
    for (int i = 0; i < c.rank_counts_size(); ++i) s += (i ? " " : "") + Str(c.rank_counts(i));
    s += "]";
  }
  if (c.bucket() >= 0) s += " (bucket " + Str(c.bucket()) + ")";
  return s;
}

bool SameCollective(const Ins& a, const Ins& b) {
  const proto::Collective &x = a.collective(), &y = b.collective();
  if (a.kind() != b.kind() || x.count() != y.count() || x.dtype() != y.dtype()) return false;
  if (x.rank_counts_size() != y.rank_counts_size()) return false;
  for (int i = 0; i < x.rank_counts_size(); ++i)
    if (x.rank_counts(i) != y.rank_counts(i)) return false;
  return true;
}

const proto::RankPlan* FindRank(const proto::Plan& plan, int rank) {
  for (const proto::RankPlan& r : plan.ranks())
    if (r.rank() == rank) return &r;
  return nullptr;
}

Status CheckWaits(const proto::RankPlan& rp) {
  const auto& list = rp.instructions();
  for (int i = 0; i < list.size(); ++i)
    for (int w : list[i].wait_for())
      if (w < 0 || w >= i || !list[w].async())
        return FailedPreconditionError("rank " + Str(rp.rank()) + " instruction " + Str(i) +
                                       " waits for instruction " + Str(w) +
                                       ", which is not an earlier async instruction");
  return OkStatus();
}

// Each rank's (instruction index) sequence of collectives in each group.
using Sequences = std::map<std::string, std::map<int, std::vector<int>>>;

Status CollectGroups(const proto::Plan& plan, Sequences* seq) {
  std::map<std::string, std::set<int>> members;
  for (const proto::ProcessGroup& g : plan.groups()) {
    members[g.name()].insert(g.ranks().begin(), g.ranks().end());
    for (int r : g.ranks()) (*seq)[g.name()][r];  // members with no collective still count
  }
  for (const proto::RankPlan& rp : plan.ranks()) {
    const auto& list = rp.instructions();
    for (int i = 0; i < list.size(); ++i) {
      if (!IsCollective(list[i].kind())) continue;
      if (list[i].collective().placement() == proto::LOCAL) continue;  // no communication
      const std::string& group = list[i].collective().group();
      auto m = members.find(group);
      if (m == members.end() || !m->second.count(rp.rank()))
        return FailedPreconditionError("rank " + Str(rp.rank()) + " instruction " + Str(i) + " (" +
                                       Describe(list[i]) + ") uses group \"" + group +
                                       "\", which does not contain it");
      (*seq)[group][rp.rank()].push_back(i);
    }
  }
  for (const auto& [group, ranks] : *seq)
    for (const auto& [rank, unused] : ranks)
      if (FindRank(plan, rank) == nullptr)
        return FailedPreconditionError("group \"" + group + "\" names rank " + Str(rank) +
                                       ", which has no instruction stream");
  return OkStatus();
}

Status CompareGroup(const proto::Plan& plan, const std::string& group,
                    const std::map<int, std::vector<int>>& ranks) {
  auto first = ranks.begin();
  const auto& ref_list = FindRank(plan, first->first)->instructions();
  for (const auto& [rank, seq] : ranks) {
    const auto& list = FindRank(plan, rank)->instructions();
    const size_t n = std::min(seq.size(), first->second.size());
    for (size_t k = 0; k < n; ++k) {
      const Ins& a = ref_list[first->second[k]];
      const Ins& b = list[seq[k]];
      if (SameCollective(a, b)) continue;
      return FailedPreconditionError(
          "group \"" + group + "\": collective " + Str(k) + " differs: rank " + Str(first->first) +
          " instruction " + Str(first->second[k]) + " is " + Describe(a) + ", rank " + Str(rank) +
          " instruction " + Str(seq[k]) + " is " + Describe(b));
    }
    if (seq.size() != first->second.size())
      return FailedPreconditionError("group \"" + group + "\": rank " + Str(first->first) +
                                     " issues " + Str(first->second.size()) +
                                     " collectives, rank " + Str(rank) + " issues " +
                                     Str(seq.size()));
  }
  return OkStatus();
}

// SENDs from a to b pair in order with RECVs on b from a.
Status CheckPointToPoint(const proto::Plan& plan) {
  std::map<std::pair<int, int>, std::vector<const Ins*>> sends, recvs;
  for (const proto::RankPlan& rp : plan.ranks())
    for (const Ins& ins : rp.instructions()) {
      if (ins.kind() == Ins::SEND) sends[{rp.rank(), ins.collective().peer()}].push_back(&ins);
      if (ins.kind() == Ins::RECV) recvs[{ins.collective().peer(), rp.rank()}].push_back(&ins);
    }
  std::set<std::pair<int, int>> pairs;
  for (const auto& [p, unused] : sends) pairs.insert(p);
  for (const auto& [p, unused] : recvs) pairs.insert(p);
  for (const auto& p : pairs) {
    const auto& s = sends[p];
    const auto& r = recvs[p];
    const std::string link = "rank " + Str(p.first) + " -> rank " + Str(p.second);
    if (s.size() != r.size())
      return FailedPreconditionError(link + ": " + Str(s.size()) + " SEND but " + Str(r.size()) +
                                     " RECV");
    for (size_t k = 0; k < s.size(); ++k)
      if (s[k]->collective().count() != r[k]->collective().count() ||
          s[k]->collective().dtype() != r[k]->collective().dtype())
        return FailedPreconditionError(link + ": message " + Str(k) + " sends " +
                                       Str(s[k]->collective().count()) + " elements, receives " +
                                       Str(r[k]->collective().count()));
  }
  return OkStatus();
}

}  // namespace

bool IsCollective(Ins::Kind kind) {
  switch (kind) {
    case Ins::GATHER_PARAMS:
    case Ins::GATHER_SECONDARY:
    case Ins::ALL_REDUCE:
    case Ins::REDUCE_SCATTER:
    case Ins::ALL_GATHER:
    case Ins::GRAD_NORM_REDUCE:
    case Ins::OVERFLOW_REDUCE:
    case Ins::ACT_ALL_REDUCE:
    case Ins::ACT_ALL_GATHER:
    case Ins::ACT_REDUCE_SCATTER:
    case Ins::ACT_ALL_TO_ALL:
    case Ins::TP_GRAD_ALL_REDUCE:
    case Ins::TIED_GRAD_ALL_REDUCE:
    case Ins::CHECKPOINT_RESTORE:
      return true;
    default:
      return false;
  }
}

Status CheckCollectiveOrder(const proto::Plan& plan) {
  for (const proto::RankPlan& rp : plan.ranks()) DS_RETURN_IF_ERROR(CheckWaits(rp));
  Sequences seq;
  DS_RETURN_IF_ERROR(CollectGroups(plan, &seq));
  for (const auto& [group, ranks] : seq)
    if (!ranks.empty()) DS_RETURN_IF_ERROR(CompareGroup(plan, group, ranks));
  return CheckPointToPoint(plan);
}

}  // namespace ds::plan
