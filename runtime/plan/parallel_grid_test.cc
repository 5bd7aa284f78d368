// The pp x dp x tp grid in Megatron's order, checked against the layout Megatron's
// initialize_model_parallel documents for 16 ranks with tp 2 and pp 4 (its docstring's
// example), and every group partitioning the world.
#include "runtime/plan/parallel_grid.h"

#include <catch2/catch.hpp>
#include <set>

namespace ds::plan {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST_CASE("ParallelGrid: Megatron's 16-rank example, tp 2 and pp 4", "[plan][grid]") {
  auto grid = ParallelGrid::Create(16, 2, 4);
  REQUIRE(grid.ok());
  CHECK(grid->dp() == 2);
  CHECK(grid->Describe() == "pp 4 x dp 2 x tp 2");
  CHECK(grid->Groups(GroupKind::kTp) ==
        Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(grid->Groups(GroupKind::kDp) ==
        Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(grid->Groups(GroupKind::kPp) ==
        Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
  CHECK(grid->Groups(GroupKind::kEmbedding) == Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}});
  const GridCoord c = grid->CoordOf(13);
  CHECK(c.pp == 3);
  CHECK(c.dp == 0);
  CHECK(c.tp == 1);
}

TEST_CASE("ParallelGrid: every kind of group partitions the world; coordinates round-trip",
          "[plan][grid]") {
  for (int world : {1, 2, 4, 8, 12})
    for (int tp : {1, 2, 4})
      for (int pp : {1, 2, 3}) {
        auto grid = ParallelGrid::Create(world, tp, pp);
        if (world % (tp * pp) != 0) {
          REQUIRE_FALSE(grid.ok());
          continue;
        }
        REQUIRE(grid.ok());
        INFO(grid->Describe());
        for (int r = 0; r < world; ++r) CHECK(grid->RankOf(grid->CoordOf(r)) == r);
        for (GroupKind kind : {GroupKind::kTp, GroupKind::kDp, GroupKind::kPp}) {
          std::multiset<int> all;
          for (const std::vector<int>& g : grid->Groups(kind)) all.insert(g.begin(), g.end());
          CHECK(all.size() == static_cast<size_t>(world));
          CHECK(std::set<int>(all.begin(), all.end()).size() == static_cast<size_t>(world));
        }
        CHECK(grid->Groups(GroupKind::kTp).front().size() == static_cast<size_t>(tp));
        CHECK(grid->Groups(GroupKind::kDp).front().size() == static_cast<size_t>(grid->dp()));
        CHECK(grid->Groups(GroupKind::kEmbedding).empty() == (pp == 1));
      }
}

TEST_CASE("ParallelGrid: sizes that do not fit the world are refused with the numbers",
          "[plan][grid]") {
  auto bad = ParallelGrid::Create(6, 4, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("parallel.tensor 4 x parallel.pipeline 1 = 4 does not divide "
                                    "the world size 6") != std::string::npos);
  CHECK_FALSE(ParallelGrid::Create(4, 0, 1).ok());
  auto ep = ParallelGrid::Create(8, 2, 1, 3);
  REQUIRE_FALSE(ep.ok());
  CHECK(ep.status().message().find("parallel.expert 3 must be >= 1 and divide the data-parallel "
                                   "size 4") != std::string::npos);
  CHECK_FALSE(ParallelGrid::Create(8, 1, 1, 1, 3).ok());
}

// DeepSpeed's expert and Ulysses groups: consecutive runs of a dp group's ranks.
TEST_CASE("ParallelGrid: ep and sp groups split each dp group into consecutive runs, edp strides",
          "[plan][grid]") {
  auto grid = ParallelGrid::Create(8, 2, 1, 2, 1);  // tp 2, dp 4: dp groups {0,2,4,6}, {1,3,5,7}
  REQUIRE(grid.ok());
  CHECK(grid->Groups(GroupKind::kEp) ==
        std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid->EpRankOf(4) == 0);
  CHECK(grid->EpRankOf(6) == 1);
  // The ranks holding the same experts: every ep-th rank of a dp group.
  CHECK(grid->Groups(GroupKind::kEdp) ==
        std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid->EdpRankOf(4) == 1);
  CHECK(grid->EdpRankOf(2) == 0);
  auto sp = ParallelGrid::Create(4, 1, 1, 1, 2);
  REQUIRE(sp.ok());
  CHECK(sp->Groups(GroupKind::kSp) == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  CHECK(sp->SpRankOf(3) == 1);
  CHECK(sp->DataRankOf(3) == 1);
  CHECK(sp->DataRankOf(1) == 0);
  CHECK(ParallelGrid::Create(4, 1, 1)->Groups(GroupKind::kEp).empty());
}

}  // namespace
}  // namespace ds::plan
