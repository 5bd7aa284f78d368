// ParallelGrid: the pp x dp x tp grid of ranks, in Megatron's order (tp fastest, then dp, then
// pp): rank = (pp_rank * dp + dp_rank) * tp + tp_rank. The process groups a 3D plan names:
//   tp   the tp ranks of one (pp, dp) cell: consecutive ranks, placed on one node
//   dp   the dp ranks of one (pp, tp) cell: where ZeRO shards and gradients are reduced
//   pp   the pp ranks of one (dp, tp) cell: the pipeline's stages
//   embedding  the first and last pp rank of one (dp, tp) cell (tied embeddings), pp > 1 only
//   ep   expert parallelism (ep > 1 only): consecutive runs of ep ranks of a dp group, as
//        DeepSpeed forms them; a rank's ep rank is its dp rank mod ep
//   edp  expert data parallelism (ep > 1 only): the dp ranks of one ep rank (every ep-th rank
//        of a dp group), which hold the same experts: where expert gradients are reduced and
//        ZeRO shards the expert states; a rank's edp rank is its dp rank / ep
//   sp   Ulysses sequence parallelism (sp > 1 only): consecutive runs of sp ranks of a dp group
//        share each micro-batch, a time chunk each; ZeRO still shards over the whole dp group
//        (DeepSpeed's dp x sp)
//   hpz  ZeRO++'s node-local groups (hpz > 1 only): consecutive runs of hpz ranks of a dp group,
//        each holding hpZ's secondary partition of the parameters (zero_hpz_partition_size);
//        with qgZ alone, one node's dp ranks (zero::QgzLocalSize): its first all-to-all
//   hpz_across  (1 < hpz < dp only) the dp ranks at the same place of every hpz group: qgZ's
//        second all-to-all
//
//   DS_ASSIGN_OR_RETURN(ParallelGrid grid, ParallelGrid::Create(8, /*tp=*/2, /*pp=*/2));
//   grid.dp();                          // 2
//   grid.Group(GroupKind::kTp, 5);      // {4, 5}
//
// Plain value; copyable.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace ds::plan {

enum class GroupKind { kTp, kDp, kPp, kEmbedding, kEp, kSp, kEdp, kHpz, kHpzAcross };

// "tp", "dp", "pp", "embedding", "ep", "sp", "edp", "hpz", "hpz_across".
const char* GroupKindName(GroupKind kind);

struct GridCoord {
  int pp = 0, dp = 0, tp = 0;
};

class ParallelGrid {
 public:
  // InvalidArgument naming the sizes when tp x pp does not divide `world`, ep, sp or hpz does
  // not divide dp, or a size is < 1.
  static StatusOr<ParallelGrid> Create(int world, int tp, int pp, int ep = 1, int sp = 1,
                                       int hpz = 1);

  int world() const { return world_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp() const { return world_ / (tp_ * pp_); }
  int ep() const { return ep_; }
  int EpRankOf(int rank) const { return CoordOf(rank).dp % ep_; }
  int EdpRankOf(int rank) const { return CoordOf(rank).dp / ep_; }
  int sp() const { return sp_; }
  int hpz() const { return hpz_; }
  int SpRankOf(int rank) const { return CoordOf(rank).dp % sp_; }
  // Which micro-batches a rank reads: its sp group's (the dp rank / sp), of dp / sp.
  int DataRankOf(int rank) const { return CoordOf(rank).dp / sp_; }

  GridCoord CoordOf(int rank) const;
  int RankOf(const GridCoord& c) const;
  // The ranks of `rank`'s group of `kind`, ascending (embedding: empty when pp == 1).
  std::vector<int> Group(GroupKind kind, int rank) const;
  // Every distinct group of `kind`, in order of their lowest rank.
  std::vector<std::vector<int>> Groups(GroupKind kind) const;
  // "pp 1 x dp 4 x tp 2".
  std::string Describe() const;

 private:
  ParallelGrid(int world, int tp, int pp, int ep, int sp, int hpz)
      : world_(world), tp_(tp), pp_(pp), ep_(ep), sp_(sp), hpz_(hpz) {}
  // Consecutive runs of `size` ranks of `rank`'s dp group (empty when size is 1).
  std::vector<int> DpRun(int rank, int size) const;
  int world_ = 1, tp_ = 1, pp_ = 1, ep_ = 1, sp_ = 1, hpz_ = 1;
};

}  // namespace ds::plan
