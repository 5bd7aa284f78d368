#include "runtime/plan/parallel_grid.h"

#include <set>

namespace ds::plan {

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kEmbedding:
      return "embedding";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kSp:
      return "sp";
    case GroupKind::kEdp:
      return "edp";
    case GroupKind::kHpz:
      return "hpz";
    case GroupKind::kHpzAcross:
      return "hpz_across";
  }
  return "?";
}

StatusOr<ParallelGrid> ParallelGrid::Create(int world, int tp, int pp, int ep, int sp, int hpz) {
  auto str = [](int v) { return std::to_string(v); };
  if (world < 1 || tp < 1 || pp < 1)
    return InvalidArgumentError("parallel grid: world " + str(world) + ", parallel.tensor " +
                                str(tp) + " and parallel.pipeline " + str(pp) +
                                " must all be >= 1");
  if (world % (tp * pp) != 0)
    return InvalidArgumentError(
        "parallel grid: parallel.tensor " + str(tp) + " x parallel.pipeline " + str(pp) + " = " +
        str(tp * pp) + " does not divide the world size " + str(world) + " (world = pp x dp x tp)");
  const int dp = world / (tp * pp);
  if (ep < 1 || dp % ep != 0)
    return InvalidArgumentError("parallel grid: parallel.expert " + str(ep) +
                                " must be >= 1 and divide the data-parallel size " + str(dp) +
                                " (world " + str(world) + " / (tp " + str(tp) + " x pp " + str(pp) +
                                "))");
  if (sp < 1 || dp % sp != 0)
    return InvalidArgumentError("parallel grid: parallel.ulysses " + str(sp) +
                                " must be >= 1 and divide the data-parallel size " + str(dp) +
                                " (world " + str(world) + " / (tp " + str(tp) + " x pp " + str(pp) +
                                "))");
  if (hpz < 1 || dp % hpz != 0)
    return InvalidArgumentError("parallel grid: zero_hpz_partition_size " + str(hpz) +
                                " must be >= 1 and divide the data-parallel size " + str(dp));
  return ParallelGrid(world, tp, pp, ep, sp, hpz);
}

GridCoord ParallelGrid::CoordOf(int rank) const {
  GridCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp();
  c.pp = rank / (tp_ * dp());
  return c;
}

int ParallelGrid::RankOf(const GridCoord& c) const { return (c.pp * dp() + c.dp) * tp_ + c.tp; }

std::vector<int> ParallelGrid::Group(GroupKind kind, int rank) const {
  const GridCoord me = CoordOf(rank);
  std::vector<int> ranks;
  switch (kind) {
    case GroupKind::kTp:
      for (int t = 0; t < tp_; ++t) ranks.push_back(RankOf({me.pp, me.dp, t}));
      break;
    case GroupKind::kDp:
      for (int d = 0; d < dp(); ++d) ranks.push_back(RankOf({me.pp, d, me.tp}));
      break;
    case GroupKind::kPp:
      for (int p = 0; p < pp_; ++p) ranks.push_back(RankOf({p, me.dp, me.tp}));
      break;
    case GroupKind::kEmbedding:
      if (pp_ > 1) ranks = {RankOf({0, me.dp, me.tp}), RankOf({pp_ - 1, me.dp, me.tp})};
      break;
    case GroupKind::kEp:
      return DpRun(rank, ep_);
    case GroupKind::kEdp:
      for (int d = me.dp % ep_; ep_ > 1 && d < dp(); d += ep_)
        ranks.push_back(RankOf({me.pp, d, me.tp}));
      break;
    case GroupKind::kSp:
      return DpRun(rank, sp_);
    case GroupKind::kHpz:
      return DpRun(rank, hpz_);
    case GroupKind::kHpzAcross:
      for (int d = me.dp % hpz_; hpz_ > 1 && hpz_ < dp() && d < dp(); d += hpz_)
        ranks.push_back(RankOf({me.pp, d, me.tp}));
      break;
  }
  return ranks;
}

std::vector<int> ParallelGrid::DpRun(int rank, int size) const {
  const GridCoord me = CoordOf(rank);
  std::vector<int> ranks;
  const int first = me.dp - me.dp % size;
  for (int d = first; size > 1 && d < first + size; ++d) ranks.push_back(RankOf({me.pp, d, me.tp}));
  return ranks;
}

std::vector<std::vector<int>> ParallelGrid::Groups(GroupKind kind) const {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r) {
    std::vector<int> g = Group(kind, r);
    if (!g.empty() && seen.insert(g).second) out.push_back(g);
  }
  return out;
}

std::string ParallelGrid::Describe() const {
  return "pp " + std::to_string(pp_) + " x dp " + std::to_string(dp()) + " x tp " +
         std::to_string(tp_);
}

}  // namespace ds::plan
