// partition_activations in the plan: full recompute's block inputs, replicated over the tp
// group, are kept as 1/tp slices: stashed right after the forward node that writes them, all-
// gathered back just before their block's recompute, and counted as slices in the memory plan.
#include <algorithm>

#include "parallel/tensor/tp_graph.h"
#include "runtime/graph/recompute.h"
#include "runtime/plan/collective_check.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::plan {
namespace {

using Ins = proto::Instruction;
using planner::testing::Count;
using planner::testing::PresetGraph;

PlanConfig Config(bool partition, RecomputeMode mode = RecomputeMode::kFull, bool sp = false) {
  PlanConfig c = planner::testing::BaseConfig(1, DType::kF32);
  c.tensor = 2;
  c.sequence_parallel = sp;
  c.recompute = mode;
  c.gradient_accumulation_steps = 2;
  c.partition_activations = partition;
  return c;
}

proto::Plan Plan(const Graph& g, const PlanConfig& c, int world = 4) {
  auto plan = planner::MakePlan(g, Topology{world, world / c.tensor, c.tensor}, c);
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

int64_t ActivationPeak(const proto::Plan& plan) {
  for (const proto::KindBytes& k : plan.ranks(0).memory().peak_by_kind())
    if (k.kind() == proto::PlanBuffer::ACTIVATIONS) return k.bytes();
  return 0;
}

int Producer(const Graph& g, int tensor) {
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
    for (int o : g.nodes[n].outputs)
      if (o == tensor) return n;
  return -1;
}

TEST_CASE("PartitionCheckpoints: the block inputs, not kept whole, placed in the forward arena",
          "[plan][recompute]") {
  const Graph full = PresetGraph("gpt2-small-test");
  auto local = parallel::TensorParallelGraph(full, 2, 0);
  REQUIRE(local.ok());
  const Graph& g = local->graph;
  auto segments = RecomputeSegments(g, RecomputeMode::kFull);
  REQUIRE(segments.ok());
  const std::vector<bool> before = KeptTensors(g, *segments);
  CHECK(PartitionCheckpoints(g, local->replicated, 2, &*segments) == 4);  // n_layer
  const std::vector<bool> after = KeptTensors(g, *segments);
  std::vector<int64_t> bytes(g.tensors.size(), 64);
  const ForwardOnlyPlacement fwd = PlaceForwardOnly(g, *segments, bytes);
  for (const RecomputeSegment& s : *segments) {
    REQUIRE(s.partitioned.size() == 1);
    const int t = s.partitioned[0];
    INFO("block input " << g.tensors[t].name);
    CHECK(s.parts == 2);
    CHECK(Producer(g, t) < s.node_begin);
    CHECK(before[t]);
    CHECK_FALSE(after[t]);
    CHECK(fwd.offset[t] >= 0);
  }
  // The tensors of a block, by the forward-only rule, never share memory with its input: the
  // recompute writes them while the gathered input is read.
  for (const RecomputeSegment& s : *segments)
    for (int n = s.node_begin; n < s.node_end; ++n)
      for (int o : g.nodes[n].outputs)
        if (fwd.offset[o] >= 0) CHECK(fwd.offset[o] != fwd.offset[s.partitioned[0]]);
  // Sequence parallelism: the block inputs are token chunks already; only the embeddings'
  // whole output, which block 0 reads through its sp_split, is the same on every rank.
  // Nothing to split with selective recompute (its inputs are head-split) or at tp 1.
  auto selective = RecomputeSegments(g, RecomputeMode::kSelective);
  REQUIRE(selective.ok());
  CHECK(PartitionCheckpoints(g, local->replicated, 2, &*selective) == 0);
  auto sp = parallel::TensorParallelGraph(full, 2, 0, /*sequence_parallel=*/true);
  REQUIRE(sp.ok());
  auto sp_segments = RecomputeSegments(sp->graph, RecomputeMode::kFull);
  REQUIRE(sp_segments.ok());
  REQUIRE(PartitionCheckpoints(sp->graph, sp->replicated, 2, &*sp_segments) == 1);
  const int whole = (*sp_segments)[0].partitioned.at(0);
  CHECK(sp->graph.nodes[Producer(sp->graph, whole)].block == -1);
  bool split_reads = false;
  for (const NodeInfo& n : sp->graph.nodes)
    for (int i : n.inputs) split_reads = split_reads || (i == whole && n.op == "sp_split");
  CHECK(split_reads);
  CHECK(PartitionCheckpoints(g, local->replicated, 1, &*segments) == 0);
}

TEST_CASE("partition_activations: stash after the writer, restore before the recompute",
          "[plan][recompute]") {
  const Graph full = PresetGraph("gpt2-small-test");
  auto local = parallel::TensorParallelGraph(full, 2, 0);
  REQUIRE(local.ok());
  const Graph& g = local->graph;
  const proto::Plan plan = Plan(full, Config(true));
  REQUIRE(CheckCollectiveOrder(plan).ok());
  const int layers = plan.model().n_layer();
  const int64_t bsh = 2 * 32 * 256;  // micro-batch x seq x n_embd
  for (const proto::RankPlan& rp : plan.ranks()) {
    INFO("rank " << rp.rank());
    CHECK(Count(rp, Ins::CHECKPOINT_STASH) == layers * 2);  // x gas
    CHECK(Count(rp, Ins::CHECKPOINT_RESTORE) == layers * 2);
    const auto& list = rp.instructions();
    for (int i = 0; i < list.size(); ++i) {
      const Ins& in = list[i];
      if (in.kind() != Ins::CHECKPOINT_STASH && in.kind() != Ins::CHECKPOINT_RESTORE) continue;
      const int t = in.activation().tensor();
      if (in.kind() == Ins::CHECKPOINT_STASH) {
        int k = i - 1;  // the last compute before: the forward that wrote it
        while (k >= 0 && list[k].kind() != Ins::FORWARD && list[k].kind() != Ins::BACKWARD) --k;
        REQUIRE(k >= 0);
        CHECK(list[k].kind() == Ins::FORWARD);
        CHECK(list[k].node_end() == Producer(g, t) + 1);
        CHECK(list[k].micro_batch() == in.micro_batch());
        continue;
      }
      REQUIRE(i + 1 < list.size());
      CHECK(list[i + 1].kind() == Ins::RECOMPUTE);
      CHECK(list[i + 1].node_begin() > Producer(g, t));
      CHECK(in.collective().count() == bsh);
      REQUIRE(in.collective().rank_counts_size() == 2);
      CHECK(in.collective().rank_counts(0) == bsh / 2);
      CHECK(in.collective().group().rfind("tp.", 0) == 0);
    }
  }
  // Each rank keeps half of every block input (fp32) instead of the whole.
  const proto::Plan whole = Plan(full, Config(false));
  CHECK(Count(whole.ranks(0), Ins::CHECKPOINT_STASH) == 0);
  const int64_t saved = ActivationPeak(whole) - ActivationPeak(plan);
  WARN("activation peak " << ActivationPeak(whole) << " -> " << ActivationPeak(plan) << " bytes");
  CHECK(saved > 0);
  CHECK(saved <= layers * bsh * 4 / 2);
  CHECK(saved >= (layers - 2) * bsh * 4 / 2);
  const proto::PlanSummary summary = SummarizePlan(plan, "job.yaml");
  CHECK(summary.partitioned_checkpoints() == layers);
  CHECK(FormatPlanSummary(summary).find("partition_activations: 4 block inputs kept as 1/2") !=
        std::string::npos);
}

TEST_CASE("partition_activations: no stash without replicated block inputs to split",
          "[plan][recompute]") {
  const Graph full = PresetGraph("gpt2-small-test");
  CHECK(Count(Plan(full, Config(true, RecomputeMode::kSelective)).ranks(0),
              Ins::CHECKPOINT_STASH) == 0);
  // Sequence parallelism: the embeddings' output only, once per micro-batch.
  const proto::Plan sp = Plan(full, Config(true, RecomputeMode::kFull, true));
  CHECK(Count(sp.ranks(0), Ins::CHECKPOINT_STASH) == 2);
  CHECK(CheckCollectiveOrder(sp).ok());
  PlanConfig tp1 = Config(true);
  tp1.tensor = 1;
  CHECK(Count(Plan(full, tp1, 2).ranks(0), Ins::CHECKPOINT_STASH) == 0);
}

}  // namespace
}  // namespace ds::plan
