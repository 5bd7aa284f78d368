// MakePlan with parallel.pipeline > 1 (pipe_plan.h): every rank's stream holds its stage's
// schedule (m forwards and backwards, its SENDs and RECVs paired with its neighbours' in order,
// every group's collectives agreeing: CheckCollectiveOrder), each stage's own layout and ZeRO
// reductions on its dp group, the norm / overflow / loss over the world, the tied embedding
// summed over the first and last stage and counted once in the norm, activations once per slot,
// and the settings not planned yet refused by name.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "parallel/pipeline/pipe_stages.h"
#include "parallel/pipeline/pipe_streams.h"
#include "parallel/pipeline/pipe_summary.h"
#include "runtime/plan/collective_check.h"
#include "runtime/plan/plan_summary.h"
#include "runtime/plan/plan_view.h"
#include "runtime/planner/plan_test_util.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;

Graph Tiny(const std::string& family) { return testing::SizedGraph(family, 4, 32, 64, 16); }

plan::PlanConfig Config(int stage, int pp, int gas) {
  plan::PlanConfig c = testing::BaseConfig(stage, DType::kF32);
  c.pipeline = pp;
  c.gradient_accumulation_steps = gas;
  c.seq_len = 16;
  c.reduce_bucket_size = 2000;  // several buckets per stage
  return c;
}

StatusOr<proto::Plan> Plan(const Graph& g, int world, int pp, const plan::PlanConfig& c) {
  return MakePlan(g, plan::Topology{world, world / pp, 1, pp}, c);
}

int CountKind(const proto::RankPlan& rp, Ins::Kind kind, std::set<std::string>* groups = nullptr) {
  int n = 0;
  for (const Ins& in : rp.instructions())
    if (in.kind() == kind) {
      ++n;
      if (groups) groups->insert(in.collective().group());
    }
  return n;
}

void CheckPlan(const Graph& g, int world, int pp, int stage, int gas) {
  INFO(g.name << " world " << world << " pp " << pp << " ZeRO-" << stage << " m " << gas);
  auto plan = Plan(g, world, pp, Config(stage, pp, gas));
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  REQUIRE(plan->stages_size() == pp);
  REQUIRE(plan->ranks_size() == world);
  const Status order = plan::CheckCollectiveOrder(*plan);
  INFO(order.ToString());
  CHECK(order.ok());
  const int dp = world / pp;
  int64_t params = 0;
  for (const proto::StageLayout& s : plan->stages()) params += s.model().num_parameters();
  const bool tied =
      g.name.find("gpt2") != std::string::npos || g.config.count("tie_word_embeddings");
  for (const proto::RankPlan& rp : plan->ranks()) {
    INFO("rank " << rp.rank());
    const int s = rp.rank() / dp;
    CHECK(rp.stage() == s);
    CHECK(CountKind(rp, Ins::FORWARD) == gas);
    CHECK(CountKind(rp, Ins::BACKWARD) == gas);
    CHECK(CountKind(rp, Ins::LOAD_MICROBATCH) == gas);
    for (const Ins& in : rp.instructions())
      if (in.kind() == Ins::BACKWARD) CHECK(in.mean_over() == gas * dp);
    std::set<std::string> world_groups, reduce_groups;
    CHECK(CountKind(rp, Ins::LOSS_REDUCE, &world_groups) == 1);
    CHECK(CountKind(rp, Ins::GRAD_NORM_REDUCE, &world_groups) == 1);
    CHECK(world_groups == std::set<std::string>{"world"});
    CountKind(rp, stage == 0 ? Ins::ALL_REDUCE : Ins::REDUCE_SCATTER, &reduce_groups);
    CHECK(reduce_groups == std::set<std::string>{"dp." + std::to_string(s)});
    const bool end = s == 0 || s == pp - 1;
    CHECK(CountKind(rp, Ins::TIED_GRAD_ALL_REDUCE) == (tied && end ? 1 : 0));
    // Sends only to the neighbouring stages of the same dp column.
    for (const Ins& in : rp.instructions())
      if (in.kind() == Ins::SEND || in.kind() == Ins::RECV) {
        const int peer = in.collective().peer();
        CHECK(peer % dp == rp.rank() % dp);
        CHECK(std::abs(peer / dp - s) == 1);
      }
    // The memory walk ran on the rank's own stage, activations counted per slot.
    CHECK(rp.memory().peak_bytes() > 0);
    const proto::Plan view = plan::RankView(*plan, rp.rank());
    CHECK(view.model().num_parameters() == plan->stages(s).model().num_parameters());
  }
  // Every parameter once, the tied one on both ends.
  plan::PlanConfig one = Config(stage, 1, gas);
  auto single = MakePlan(g, plan::Topology{1, 1, 1, 1}, one);
  REQUIRE(single.ok());
  int64_t wte = 0;
  if (tied)
    for (const proto::PlanParam& p : single->model().params())
      if (p.name() == "wte") wte = p.numel();
  CHECK(params == single->model().num_parameters() + wte);
}

TEST_CASE("MakePlan plans a pipeline over every stage and dp rank", "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2"), llama = Tiny("llama");
  for (int stage : {0, 1}) {
    CheckPlan(gpt, 2, 2, stage, 4);
    CheckPlan(gpt, 4, 2, stage, 4);
    CheckPlan(gpt, 4, 4, stage, 8);
    CheckPlan(llama, 4, 2, stage, 3);
  }
  CheckPlan(llama, 4, 2, 2, 4);
  CheckPlan(llama, 8, 4, 2, 5);
  CheckPlan(gpt, 4, 2, 2, 4);  // ZeRO-2 with the tied embedding: its shards summed
  CheckPlan(gpt, 8, 4, 2, 5);
}

TEST_CASE("MakePlan plans interleaved schedules: every chunk's forward and backward",
          "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2");
  for (int world : {2, 4}) {
    plan::PlanConfig c = Config(1, 2, 4);
    c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
    c.virtual_stages = 2;
    auto plan = Plan(gpt, world, 2, c);
    INFO((plan.ok() ? "" : plan.status().ToString()));
    REQUIRE(plan.ok());
    CHECK(plan::CheckCollectiveOrder(*plan).ok());
    for (const proto::RankPlan& rp : plan->ranks()) {
      CHECK(CountKind(rp, Ins::FORWARD) == 8);  // 4 micro-batches x 2 chunks
      CHECK(CountKind(rp, Ins::BACKWARD) == 8);
      CHECK(CountKind(rp, Ins::LOAD_MICROBATCH) == 4);
      CHECK(CountKind(rp, Ins::TIED_GRAD_ALL_REDUCE) == 1);
      CHECK(rp.memory().peak_bytes() > 0);
    }
    CHECK(plan->stages(0).slots_size() == 2);
  }
  // 4 ranks x 2 chunks: the last rank hands its first chunk's output on to the first rank, over
  // a link of its own; every SEND and RECV names a group of the plan that holds both ends.
  const Graph eight = testing::SizedGraph("gpt2", 8, 32, 64, 16);
  plan::PlanConfig c = Config(0, 4, 4);
  c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
  c.virtual_stages = 2;
  auto plan = Plan(eight, 4, 4, c);
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  std::map<std::string, std::set<int>> groups;
  for (const proto::ProcessGroup& g : plan->groups())
    groups[g.name()] = std::set<int>(g.ranks().begin(), g.ranks().end());
  CHECK(groups.at("pipe.3-0") == std::set<int>{0, 3});
  for (const proto::RankPlan& rp : plan->ranks())
    for (const Ins& in : rp.instructions())
      if (in.kind() == Ins::SEND || in.kind() == Ins::RECV) {
        const auto it = groups.find(in.collective().group());
        REQUIRE(it != groups.end());
        CHECK(it->second == std::set<int>{rp.rank(), in.collective().peer()});
      }
}

// 3D: pp 2 x dp 2 x tp 2. Each stage's tp collectives inside its forward and backward, on its
// own tp groups; the world's groups numbered in Megatron's order; links per (dp, tp) column.
TEST_CASE("MakePlan plans pp x dp x tp", "[plan][pipe]") {
  for (const char* family : {"gpt2", "llama"}) {
    const Graph g = Tiny(family);
    plan::PlanConfig c = Config(1, 2, 4);
    c.tensor = 2;
    auto plan = MakePlan(g, plan::Topology{8, 2, 2, 2}, c);
    INFO(family << ": " << (plan.ok() ? "" : plan.status().ToString()));
    REQUIRE(plan.ok());
    const Status order = plan::CheckCollectiveOrder(*plan);
    INFO(order.ToString());
    CHECK(order.ok());
    std::map<std::string, std::vector<int>> groups;
    for (const proto::ProcessGroup& pg : plan->groups())
      groups[pg.name()] = std::vector<int>(pg.ranks().begin(), pg.ranks().end());
    CHECK(groups.at("tp.0") == std::vector<int>{0, 1});
    CHECK(groups.at("tp.3") == std::vector<int>{6, 7});
    CHECK(groups.at("dp.1") == std::vector<int>{1, 3});
    CHECK(groups.at("dp.2") == std::vector<int>{4, 6});
    CHECK(groups.at("pipe.3-7") == std::vector<int>{3, 7});
    for (const proto::RankPlan& rp : plan->ranks()) {
      INFO("rank " << rp.rank());
      const int s = rp.rank() / 4;
      std::set<std::string> act, reduce;
      CHECK(CountKind(rp, Ins::ACT_ALL_REDUCE, &act) > 0);
      CHECK(act == std::set<std::string>{"tp." + std::to_string(rp.rank() / 2)});
      CountKind(rp, Ins::REDUCE_SCATTER, &reduce);
      CHECK(reduce == std::set<std::string>{"dp." + std::to_string(s * 2 + rp.rank() % 2)});
      for (const Ins& in : rp.instructions())
        if (in.kind() == Ins::SEND || in.kind() == Ins::RECV)
          CHECK(in.collective().peer() % 4 == rp.rank() % 4);
    }
  }
}

// Interleaving with tensor parallelism, and recompute: the stage plan is made over the rank's
// chunks in one graph; each chunk's forward and backward run that chunk's part of it (node ranges
// in the chunk's numbering, its tp collectives and recomputes), every collective agreeing.
TEST_CASE("MakePlan cuts a stage plan into chunks: TP x interleaved, recompute", "[plan][pipe]") {
  const Graph llama = testing::SizedGraph("llama", 8, 32, 64, 16);
  struct Case {
    int tp, v;
    RecomputeMode recompute;
    bool partition = false, sp = false;
  };
  for (const Case& k :
       {Case{2, 2, RecomputeMode::kNone}, Case{1, 2, RecomputeMode::kFull},
        Case{2, 2, RecomputeMode::kSelective}, Case{2, 1, RecomputeMode::kFull},
        Case{2, 2, RecomputeMode::kFull, true}, Case{2, 1, RecomputeMode::kNone, false, true},
        Case{2, 2, RecomputeMode::kSelective, false, true}}) {
    INFO("tp " << k.tp << " v " << k.v << " recompute " << RecomputeModeName(k.recompute)
               << (k.partition ? " partition_activations" : "") << (k.sp ? " sp" : ""));
    plan::PlanConfig c = Config(1, 2, 4);
    c.tensor = k.tp;
    c.recompute = k.recompute;
    c.partition_activations = k.partition;
    c.sequence_parallel = k.sp;
    if (k.v > 1) {
      c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
      c.virtual_stages = k.v;
    }
    auto plan = MakePlan(llama, plan::Topology{2 * k.tp, 1, k.tp, 2}, c);
    INFO((plan.ok() ? "" : plan.status().ToString()));
    REQUIRE(plan.ok());
    const Status order = plan::CheckCollectiveOrder(*plan);
    INFO(order.ToString());
    CHECK(order.ok());
    for (const proto::RankPlan& rp : plan->ranks()) {
      INFO("rank " << rp.rank());
      // Per (micro-batch, chunk): the forward and the backward pieces each cover the chunk's
      // nodes once, and its recomputes lie inside them.
      std::map<std::pair<int, int>, int> fwd, bwd, last;
      for (const Ins& in : rp.instructions()) {
        const std::pair<int, int> at{in.micro_batch(), in.chunk()};
        const int n = in.node_end() - in.node_begin();
        if (in.kind() == Ins::FORWARD) fwd[at] += n;
        if (in.kind() == Ins::BACKWARD) bwd[at] += n;
        if (in.kind() == Ins::RECOMPUTE) last[at] = std::max(last[at], in.node_end());
      }
      CHECK(static_cast<int>(fwd.size()) == 4 * k.v);
      CHECK(fwd == bwd);
      for (const auto& [at, end] : last) CHECK(end <= fwd.at(at));
      // Sequence parallelism recomputes its gathers whatever the mode.
      CHECK((CountKind(rp, Ins::RECOMPUTE) > 0) == (k.recompute != RecomputeMode::kNone || k.sp));
      CHECK((CountKind(rp, Ins::ACT_ALL_REDUCE) > 0) == (k.tp > 1));
      CHECK((CountKind(rp, Ins::ACT_ALL_GATHER) > 0) == k.sp);
      // Under sequence parallelism each tp rank sends its chunk of the tokens: [2 x 16 / 2, 32].
      for (const Ins& in : rp.instructions())
        if (in.kind() == Ins::SEND) CHECK(in.collective().count() == 2 * 16 / (k.sp ? 2 : 1) * 32);
      CHECK((CountKind(rp, Ins::CHECKPOINT_RESTORE) > 0) == k.partition);
      CHECK(rp.memory().peak_bytes() > 0);
    }
  }
}

// zb-h1: each backward split into its input half (with the gradients' send) and its weight half,
// which the reductions of that micro-batch follow; the slots kept until the weights.
TEST_CASE("MakePlan plans zb-h1 with split backwards", "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2");
  plan::PlanConfig c = Config(1, 2, 4);
  c.pipe_schedule = plan::PipeScheduleKind::kZbH1;
  auto plan = Plan(gpt, 4, 2, c);
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  CHECK(plan::CheckCollectiveOrder(*plan).ok());
  for (const proto::RankPlan& rp : plan->ranks()) {
    CHECK(CountKind(rp, Ins::BACKWARD) == 0);
    CHECK(CountKind(rp, Ins::BACKWARD_INPUT) == 4);
    CHECK(CountKind(rp, Ins::BACKWARD_WEIGHT) == 4);
    // The last weight half comes before the data-parallel reduction.
    int last_w = -1, reduce = -1;
    for (int i = 0; i < rp.instructions_size(); ++i) {
      if (rp.instructions(i).kind() == Ins::BACKWARD_WEIGHT) last_w = i;
      if (rp.instructions(i).kind() == Ins::REDUCE_SCATTER && reduce < 0) reduce = i;
    }
    CHECK(last_w < reduce);
  }
  CHECK(plan->stages(0).slots(0) == 2);
}

TEST_CASE("A pipeline's tied embedding is counted in the norm on the first stage only",
          "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2");
  auto plan = Plan(gpt, 2, 2, Config(0, 2, 2));
  REQUIRE(plan.ok());
  auto norm_elements = [&](int rank) {
    int64_t n = 0;
    for (const Ins& in : plan->ranks(rank).instructions())
      if (in.kind() == Ins::GRAD_NORM_REDUCE)
        for (const proto::ParamRange& r : in.ranges()) n += r.count();
    return n;
  };
  int64_t wte = 0;
  for (const proto::PlanParam& p : plan->stages(1).model().params())
    if (p.name() == "wte") wte = p.numel();
  REQUIRE(wte == 64 * 32);
  // Stage 0 counts all of its flat buffer, stage 1 all but the tied rows.
  CHECK(norm_elements(0) == plan->stages(0).model().flat_elements());
  CHECK(norm_elements(1) == plan->stages(1).model().flat_elements() - wte);
  // The tied reduce moves the same count on both ends, before the last reductions.
  for (int r : {0, 1}) {
    const auto& list = plan->ranks(r).instructions();
    int tied = -1, reduce = -1;
    for (int i = 0; i < list.size(); ++i) {
      if (list[i].kind() == Ins::TIED_GRAD_ALL_REDUCE) tied = i;
      if (list[i].kind() == Ins::ALL_REDUCE && reduce < 0) reduce = i;
    }
    REQUIRE(tied >= 0);
    CHECK(tied < reduce);
    CHECK(list[tied].collective().count() == wte);
    CHECK(list[tied].collective().group() == "embedding.0");
  }
}

TEST_CASE("Activations are planned once per micro-batch in flight", "[plan][pipe]") {
  const Graph llama = Tiny("llama");
  auto one = Plan(llama, 2, 2, Config(0, 2, 1));
  auto four = Plan(llama, 2, 2, Config(0, 2, 4));
  REQUIRE(one.ok());
  REQUIRE(four.ok());
  // 1F1B: the first stage keeps p = 2 micro-batches in flight, the last one.
  CHECK(one->stages(0).slots(0) == 1);
  CHECK(four->stages(0).slots(0) == 2);
  CHECK(four->stages(1).slots(0) == 1);
  auto act = [](const proto::MemorySummary& m) {
    for (const proto::KindBytes& k : m.peak_by_kind())
      if (k.kind() == proto::PlanBuffer::ACTIVATIONS) return k.bytes();
    return int64_t{0};
  };
  CHECK(act(four->ranks(0).memory()) == 2 * act(one->ranks(0).memory()));
  CHECK(act(four->ranks(1).memory()) == act(one->ranks(1).memory()));
}

// ds-plan's pipeline section: the whole model's parameters (the tied embedding once), each
// stage's blocks, slots and traffic by group, and the bubble by formula and by simulation.
TEST_CASE("The plan summary shows each stage and the schedule's bubble", "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2");
  auto single = MakePlan(gpt, plan::Topology{1, 1, 1, 1}, Config(1, 1, 4));
  REQUIRE(single.ok());
  for (int v : {1, 2}) {
    plan::PlanConfig c = Config(1, 2, 4);
    if (v == 2) {
      c.pipe_schedule = plan::PipeScheduleKind::kInterleaved;
      c.virtual_stages = 2;
    }
    auto plan = Plan(gpt, 4, 2, c);
    REQUIRE(plan.ok());
    proto::PlanSummary s = plan::SummarizePlan(*plan, "job.yaml");
    parallel::SummarizePipeline(*plan, &s);
    INFO(plan::FormatPlanSummary(s) + parallel::FormatPipelineSummary(s));
    CHECK(s.num_parameters() == single->model().num_parameters());
    const proto::PipelineSummary& p = s.pipeline();
    REQUIRE(p.stage_size() == 2);
    CHECK(p.schedule() == (v == 1 ? "1f1b" : "interleaved"));
    // 1F1B: (p-1)/(m+p-1); interleaved: (p-1)/(v m + p-1) in chunk costs.
    CHECK(p.bubble_formula() == Approx(v == 1 ? 1.0 / 5 : 1.0 / 9));
    for (double b : p.bubble_simulated()) CHECK(b == Approx(p.bubble_formula()));
    if (v == 1) {
      CHECK(p.stage(0).blocks() == "embeddings + blocks 0-1");
      CHECK(p.stage(1).blocks() == "blocks 2-3 + head");
    } else {
      CHECK(p.stage(0).blocks() == "embeddings + block 0, block 2");
      CHECK(p.stage(1).blocks() == "block 1, block 3 + head");
    }
    // [2, 16, 32] fp32 messages: each of the 2 v - 1 boundaries carries m activations and m
    // gradients, half of them sent by each rank.
    // ZeRO-1 over dp 2: each rank sends half of its stage's fp32 gradients (reduce-scatter)
    // and half of its updated parameters (all-gather), the stage's parameter bytes in all; the
    // tied embedding's gradient [64, 32] is all-reduced between the end stages (2 ranks: each
    // sends its 8 KiB once).
    for (int i = 0; i < p.stage_size(); ++i) {
      const proto::StageSummary& st = p.stage(i);
      INFO("stage " << i);
      CHECK(st.p2p_sent_bytes() == int64_t{2 * v - 1} * 4 * 2 / 2 * (2 * 16 * 32 * 4));
      CHECK(st.dp_sent_bytes() == plan->stages(i).model().num_parameters() * 4);
      CHECK(st.embedding_sent_bytes() == 64 * 32 * 4);
      CHECK(st.rank().activation_peak_bytes() > 0);
    }
  }
}

// Each stage's FLOPs per micro-batch add up to the whole model's (the pipe ops add only the
// received gradients' sums); a split whose stages compute unevenly gets a note naming the way out.
TEST_CASE("The plan summary shows each stage's FLOPs and an uneven split", "[plan][pipe]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 256, 8192, 256);
  plan::PlanConfig c = Config(0, 2, 8);
  c.micro_batch_size = 4;
  c.seq_len = 256;
  auto whole = parallel::GraphFlops(g, 4, 256);
  REQUIRE(whole.ok());
  for (const char* method : {"parameters", "flops"}) {
    INFO(method);
    c.partition_method = method;
    auto plan = Plan(g, 2, 2, c);
    REQUIRE(plan.ok());
    proto::PlanSummary s = plan::SummarizePlan(*plan, "job.yaml");
    parallel::SummarizePipeline(*plan, &s);
    const double sum = s.pipeline().stage(0).flops() + s.pipeline().stage(1).flops();
    CHECK(sum == Approx(*whole).epsilon(1e-3));
    const std::string text = parallel::FormatPipelineSummary(s);
    INFO(text);
    const bool uneven = std::string(method) == "parameters";  // 2 + 2 blocks, the head on one
    CHECK((text.find("partition_method flops balances the FLOPs") != std::string::npos) == uneven);
  }
}

// ZeRO-2: each end stage's dp ranks hold different slices of the tied embedding's gradient, so
// the sum runs after the last reductions over one group of both stages' dp ranks (per tp rank),
// each placing its slice at the slice's position in the whole embedding: together the ranges of
// one stage cover it once.
TEST_CASE("ZeRO-2 sums a pipeline's tied embedding shards over both stages' dp ranks",
          "[plan][pipe]") {
  const Graph gpt = Tiny("gpt2");
  auto plan = Plan(gpt, 4, 2, Config(2, 2, 2));
  INFO((plan.ok() ? "" : plan.status().ToString()));
  REQUIRE(plan.ok());
  CHECK(plan::CheckCollectiveOrder(*plan).ok());
  std::map<std::string, std::set<int>> groups;
  for (const proto::ProcessGroup& g : plan->groups())
    groups[g.name()] = std::set<int>(g.ranks().begin(), g.ranks().end());
  CHECK(groups.at("embedding.0") == std::set<int>{0, 1, 2, 3});
  const int64_t wte = 64 * 32;
  for (int s : {0, 1}) {
    std::vector<std::pair<int64_t, int64_t>> covered;  // [at, at + count) over the stage's ranks
    for (int r : {2 * s, 2 * s + 1}) {
      const auto& list = plan->ranks(r).instructions();
      int tied = -1, reduce = -1, norm = -1;
      for (int i = 0; i < list.size(); ++i) {
        if (list[i].kind() == Ins::TIED_GRAD_ALL_REDUCE) tied = i;
        if (list[i].kind() == Ins::REDUCE_SCATTER) reduce = i;
        if (list[i].kind() == Ins::GRAD_NORM_REDUCE) norm = i;
      }
      REQUIRE(tied >= 0);
      CHECK(reduce < tied);  // after the last reductions, before the norm
      CHECK(tied < norm);
      const Ins& in = list[tied];
      CHECK(in.in_shard());
      CHECK(in.collective().count() == wte);
      CHECK(in.collective().group() == "embedding.0");
      for (const proto::ParamRange& p : in.ranges())
        covered.push_back({p.at(), p.at() + p.count()});
    }
    std::sort(covered.begin(), covered.end());
    int64_t at = 0;
    for (auto [b, e] : covered) {
      CHECK(b == at);
      at = e;
    }
    CHECK(at == wte);
  }
}

TEST_CASE("Pipeline settings not planned yet are refused by name", "[plan][pipe]") {
  const Graph llama = Tiny("llama");
  auto refused = [](const StatusOr<proto::Plan>& p, const std::string& what) {
    INFO((p.ok() ? "planned" : p.status().ToString()));
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().message().find(what) != std::string::npos);
  };
  refused(Plan(llama, 2, 2, Config(3, 2, 2)), "zero_optimization.stage 3");
  plan::PlanConfig zb = Config(1, 2, 2);
  zb.pipe_schedule = plan::PipeScheduleKind::kZbH1;
  zb.recompute = RecomputeMode::kFull;
  refused(Plan(llama, 2, 2, zb), "training.recompute full with pipeline.schedule zb-h1");
}

}  // namespace
}  // namespace ds::planner
