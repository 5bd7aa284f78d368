// The cost model and the layout search (auto_layout.h, step_sim.h, host_rates.h) on a fixed rate
// table: the search never proposes what does not fit and says the closest layout when nothing
// does; a faster link never slows a layout nor makes one that moves more bytes between nodes
// rank lower; the simulation overlaps what the plan overlaps and prices pipeline bubbles; bad
// input gets one error each.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "runtime/planner/auto_command.h"
#include "runtime/planner/auto_layout.h"
#include "runtime/planner/host_rates.h"
#include "runtime/planner/plan_test_util.h"
#include "runtime/planner/rates_test_util.h"
#include "runtime/planner/step_sim.h"

namespace ds::planner {
namespace {

// A host of 64 cores (no rank shares one) whose products run at 100 GFLOP/s for small shapes
// and 400 for large ones.
HostRates Rates(double inter_gbps) { return testing::TestRates(inter_gbps, 100, 400, true); }

plan::PlanConfig Config() {
  plan::PlanConfig c = testing::BaseConfig(0, DType::kF32);
  c.train_batch_size = 8;
  c.micro_batch_size = 1;
  c.gradient_accumulation_steps = 8;
  c.seq_len = 64;
  return c;
}

AutoOptions Options(double inter_gbps, int64_t memory = int64_t(64) << 30) {
  AutoOptions o;
  o.node_slots = {2, 2};
  o.rates = Rates(inter_gbps);
  o.host_memory_per_node = memory;
  return o;
}

TEST_CASE("HostRates: exact at a sample, between its neighbours elsewhere, JSON round trip",
          "[planner][auto]") {
  const HostRates r = Rates(1);
  CHECK(r.GemmGflops(DType::kF32, 1024, 1024, 1024) == 400);
  CHECK(r.GemmGflops(DType::kBF16, 64, 64, 64) == 200);
  const double mid = r.GemmGflops(DType::kF32, 512, 1024, 1024);
  CHECK(mid > 100);
  CHECK(mid < 400);
  auto back = HostRatesFromJson(HostRatesToJson(r), "test");
  REQUIRE(back.ok());
  CHECK(back->gemm_f32.size() == r.gemm_f32.size());
  CHECK(back->GemmGflops(DType::kF32, 512, 1024, 1024) == mid);
  CHECK(back->inter.gbps == 1);
  Json broken = HostRatesToJson(r);
  broken.Set("stream_gbps", Json::Double(-1));
  auto bad = HostRatesFromJson(broken, "rates.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("rates.json: \"stream_gbps\" must be a positive number") !=
        std::string::npos);
}

TEST_CASE("SearchLayouts: what it proposes fits; nothing fits: the closest is named",
          "[planner][auto]") {
  const Graph g = testing::SizedGraph("gpt2", 2, 64, 256, 64);
  auto all = SearchLayouts(g, Config(), Options(10));
  REQUIRE(all.ok());
  REQUIRE(all->layouts.size() > 10);
  // Fastest first; within 0.1% of the fastest of a run, the smaller peak first.
  for (size_t i = 1; i < all->layouts.size(); ++i) {
    const Layout &a = all->layouts[i - 1], &b = all->layouts[i];
    CHECK(a.prediction.step_ms <= b.prediction.step_ms * 1.001 + 1e-12);
    if (b.prediction.step_ms < a.prediction.step_ms) CHECK(a.peak_bytes <= b.peak_bytes);
  }
  // A budget between the smallest and largest peaks: only those under it come back.
  int64_t lo = INT64_MAX, hi = 0;
  for (const Layout& l : all->layouts) {
    lo = std::min(lo, l.peak_bytes);
    hi = std::max(hi, l.peak_bytes);
  }
  REQUIRE(lo < hi);
  const int64_t budget = (lo + hi) / 2;
  auto some = SearchLayouts(g, Config(), Options(10, budget * 2));  // 2 ranks per machine
  REQUIRE(some.ok());
  CHECK(some->too_big > 0);
  CHECK_FALSE(some->layouts.empty());
  for (const Layout& l : some->layouts) CHECK(l.peak_bytes <= budget);
  auto none = SearchLayouts(g, Config(), Options(10, lo));  // every rank gets lo / 2
  REQUIRE(none.ok());
  CHECK(none->layouts.empty());
  CHECK(none->closest.peak_bytes <= lo);  // recompute may bring a layout closer
  CHECK(none->closest.peak_bytes > none->closest.budget_bytes);
}

// The grid beyond tensor x pipeline x data: a pipeline's schedules (1f1b, zb-h1, interleaved
// where the blocks split into 2 chunks per stage), Ulysses where the sequence and the heads
// split, expert parallelism only for a model with experts; a schedule the job gives is kept;
// what ds-launch hands the workers (DS_LAYOUT) carries all of it.
TEST_CASE("SearchLayouts: schedules, Ulysses and experts are searched where they apply",
          "[planner][auto]") {
  auto seen = [](const AutoResult& r, auto pred) {
    return std::any_of(r.layouts.begin(), r.layouts.end(), pred);
  };
  const Graph g = testing::SizedGraph("gpt2", 4, 64, 256, 64);
  AutoOptions o = Options(10);
  o.node_slots = {4};
  auto r = SearchLayouts(g, Config(), o);
  REQUIRE(r.ok());
  using plan::PipeScheduleKind;
  for (PipeScheduleKind k :
       {PipeScheduleKind::k1F1B, PipeScheduleKind::kZbH1, PipeScheduleKind::kInterleaved})
    CHECK(seen(*r, [&](const Layout& l) { return l.pp == 2 && l.schedule == k; }));
  CHECK(seen(*r, [](const Layout& l) { return l.sp == 2; }));
  CHECK(seen(*r, [](const Layout& l) { return l.sp == 4; }));
  CHECK_FALSE(seen(*r, [](const Layout& l) { return l.ep > 1; }));  // a dense model
  for (const Layout& l : r->layouts) {
    CHECK(Config().train_batch_size == l.micro * l.gas * (l.dp / l.sp));
    CHECK((l.virtual_stages > 1) == (l.schedule == PipeScheduleKind::kInterleaved && l.pp > 1));
  }
  plan::PlanConfig zb = Config();
  zb.pipe_schedule = PipeScheduleKind::kZbH1;
  o.schedule_given = true;
  auto kept = SearchLayouts(g, zb, o);
  REQUIRE(kept.ok());
  CHECK(seen(*kept, [](const Layout& l) { return l.pp == 2; }));
  CHECK_FALSE(seen(
      *kept, [](const Layout& l) { return l.pp > 1 && l.schedule != PipeScheduleKind::kZbH1; }));
  Graph moe = testing::PresetGraph("gpt2-moe-tiny");
  plan::PlanConfig mc = Config();
  mc.seq_len = 16;
  o.schedule_given = false;
  auto experts = SearchLayouts(moe, mc, o);
  REQUIRE(experts.ok());
  CHECK(seen(*experts, [](const Layout& l) { return l.ep == 2; }));
  // DS_LAYOUT carries every part of the layout to the workers.
  Layout l;
  l.tp = 1, l.pp = 2, l.dp = 2, l.stage = 1, l.micro = 2, l.gas = 4, l.sp = 2, l.ep = 1;
  l.schedule = PipeScheduleKind::kInterleaved, l.virtual_stages = 2;
  config::JobConfig job;
  REQUIRE(ApplyLayoutSpec(LayoutSpec(l), &job).ok());
  CHECK(job.parallel.pipeline == 2);
  CHECK(job.parallel.ulysses == 2);
  CHECK(job.pipeline.schedule == "interleaved");
  CHECK(job.pipeline.virtual_stages == 2);
  CHECK(job.zero.hpz_partition_size == 1);
  l.hpz = 2;
  REQUIRE(ApplyLayoutSpec(LayoutSpec(l), &job).ok());
  CHECK(job.zero.hpz_partition_size == 2);
  CHECK_FALSE(ApplyLayoutSpec("tensor=1 pipeline=1", &job).ok());
}

// ZeRO-3 across nodes of 2 ranks: each layout is also tried with hpZ over the node's dp ranks,
// which keeps backward's gathers inside the node; over a slow link between nodes it is the
// faster, and it is never tried where a node holds one dp rank or the job gives its own hpZ.
TEST_CASE("SearchLayouts: ZeRO-3 also with hpZ over each node's dp ranks", "[planner][auto]") {
  const Graph g = testing::SizedGraph("gpt2", 2, 64, 256, 64);
  plan::PlanConfig base = Config();
  base.max_reuse_distance = 0;             // backward gathers again, and no parameter stays whole,
  base.param_persistence_threshold = 100;  // as at a model's real size
  auto r = SearchLayouts(g, base, Options(0.05));
  REQUIRE(r.ok());
  int pairs = 0;
  for (const Layout& h : r->layouts) {
    if (h.hpz == 1) continue;
    CHECK(h.stage == 3);
    CHECK(h.hpz == 2 / h.tp);
    CHECK(h.Name().find(" hpz ") != std::string::npos);
    for (const Layout& p : r->layouts)
      if (p.hpz == 1 && p.stage == 3 && p.tp == h.tp && p.pp == h.pp && p.micro == h.micro &&
          p.recompute == h.recompute && p.schedule == h.schedule && p.sp == h.sp) {
        INFO(h.Name() << ": " << h.prediction.step_ms << " ms, without hpZ " << p.prediction.step_ms
                      << "; between nodes " << h.prediction.inter_bytes << " against "
                      << p.prediction.inter_bytes << " bytes");
        CHECK(h.prediction.inter_bytes < p.prediction.inter_bytes);
        CHECK(h.prediction.step_ms < p.prediction.step_ms);
        ++pairs;
      }
  }
  CHECK(pairs > 0);
  AutoOptions single = Options(0.05);
  single.node_slots = {1, 1, 1, 1};
  base.hpz_partition_size = 1;
  auto one_each = SearchLayouts(g, base, single);
  REQUIRE(one_each.ok());
  for (const Layout& l : one_each->layouts) CHECK(l.hpz == 1);
}

TEST_CASE(
    "SearchLayouts: a faster link between nodes never slows a layout or demotes one that "
    "moves more bytes between nodes",
    "[planner][auto]") {
  const Graph g = testing::SizedGraph("gpt2", 2, 64, 256, 64);
  auto slow = SearchLayouts(g, Config(), Options(0.05));
  auto fast = SearchLayouts(g, Config(), Options(50));
  REQUIRE(slow.ok());
  REQUIRE(fast.ok());
  REQUIRE(slow->layouts.size() == fast->layouts.size());
  auto place = [](const AutoResult& r, const std::string& name) {
    for (size_t i = 0; i < r.layouts.size(); ++i)
      if (r.layouts[i].Name() == name) return static_cast<int>(i);
    return -1;
  };
  for (const Layout& s : slow->layouts) {
    const int i = place(*fast, s.Name());
    REQUIRE(i >= 0);
    const Layout& f = fast->layouts[i];
    INFO(s.Name());
    CHECK(f.prediction.step_ms <= s.prediction.step_ms + 1e-9);
    CHECK(f.prediction.inter_bytes == s.prediction.inter_bytes);
  }
  // Among any two layouts, the one moving more bytes between nodes does not fall behind the
  // other when the link gets faster.
  for (const Layout& a : slow->layouts)
    for (const Layout& b : slow->layouts) {
      if (a.prediction.inter_bytes <= b.prediction.inter_bytes) continue;
      const bool ahead_slow = place(*slow, a.Name()) < place(*slow, b.Name());
      const bool ahead_fast = place(*fast, a.Name()) < place(*fast, b.Name());
      INFO(a.Name() << " vs " << b.Name());
      if (ahead_slow) CHECK(ahead_fast);
    }
  // The slow link decides: the best layout there moves fewer bytes between nodes than the
  // most between-node layout.
  int64_t most = 0;
  for (const Layout& l : slow->layouts) most = std::max(most, l.prediction.inter_bytes);
  CHECK(slow->layouts[0].prediction.inter_bytes < most);
}

TEST_CASE(
    "PredictStep: overlap_comm hides the reduction behind backward; a pipeline's bubble "
    "is priced",
    "[planner][auto]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 128, 256, 64);
  const HostRates r = Rates(0.5);
  const std::vector<int> node = {0, 1}, host = {0, 1};
  plan::PlanConfig c = Config();
  c.stage = 2;
  c.train_batch_size = 2;
  c.gradient_accumulation_steps = 1;
  c.reduce_bucket_size = 20000;
  auto predict = [&](const plan::PlanConfig& cfg, int pp) {
    plan::PlanConfig x = cfg;
    x.pipeline = pp;
    x.train_batch_size = x.micro_batch_size * x.gradient_accumulation_steps * (2 / pp);
    auto topo = plan::TopologyFor(2, x);
    REQUIRE(topo.ok());
    auto plan = MakePlan(g, *topo, x);
    INFO((plan.ok() ? "" : plan.status().ToString()));
    REQUIRE(plan.ok());
    auto p = PredictStep(*plan, g, x, node, host, r);
    INFO((p.ok() ? "" : p.status().ToString()));
    REQUIRE(p.ok());
    return *p;
  };
  const StepPrediction serial = predict(c, 1);
  c.overlap_comm = true;
  const StepPrediction overlapped = predict(c, 1);
  CHECK(overlapped.compute_ms == Approx(serial.compute_ms));
  CHECK(overlapped.step_ms < serial.step_ms);
  INFO("serial: step " << serial.step_ms << " compute " << serial.compute_ms << " comm "
                       << serial.comm_ms);
  CHECK(serial.exposed_comm_ms == Approx(serial.comm_ms).epsilon(0.01));
  // Two stages, one micro-batch: the second stage waits for the first's forward and the first
  // for the second's backward, so the step is longer than either stage's compute.
  c.overlap_comm = false;
  c.stage = 0;
  const StepPrediction pipe = predict(c, 2);
  CHECK(pipe.step_ms > pipe.compute_ms * 1.3);
}

// offload_optimizer device auto: a layout that fits only with its optimizer states (and at
// stage 3 its parameters) on NVMe is proposed, with its swaps timed at the NVMe rates; more
// offload than a fit needs is not tried; DS_LAYOUT carries the choice to the workers.
TEST_CASE("SearchLayouts: with offload auto, layouts that fit only by swapping to NVMe",
          "[planner][auto]") {
  const Graph g = testing::SizedGraph("gpt2", 4, 512, 8192, 64);
  plan::PlanConfig base = Config();
  auto all = SearchLayouts(g, base, Options(10));
  REQUIRE(all.ok());
  int64_t lo = INT64_MAX;
  for (const Layout& l : all->layouts) lo = std::min(lo, l.peak_bytes);
  const int64_t budget = lo * 85 / 100;  // per rank: below every layout in memory
  AutoOptions o = Options(10, budget * 2);
  o.rates.nvme_read_gbps = o.rates.nvme_write_gbps = 1;
  auto in_memory = SearchLayouts(g, base, o);
  REQUIRE(in_memory.ok());
  CHECK(in_memory->layouts.empty());
  o.offload_max = 2;
  auto swapped = SearchLayouts(g, base, o);
  REQUIRE(swapped.ok());
  INFO("budget " << budget << ", closest " << swapped->closest.Name() << " at "
                 << swapped->closest.peak_bytes);
  REQUIRE_FALSE(swapped->layouts.empty());
  for (const Layout& l : swapped->layouts) {
    INFO(l.Name());
    CHECK(l.offload >= 1);
    CHECK(l.stage >= 1);
    CHECK(l.peak_bytes <= budget);
    CHECK(l.Name().find(" offload nvme") != std::string::npos);
    CHECK(l.prediction.kind_ms.at("SWAP_IN") > 0);
    CHECK(l.prediction.kind_ms.at("SWAP_OUT") > 0);
  }
  // A faster device never slows a layout; at 1 GB/s the swaps cost the best layout time.
  o.rates.nvme_read_gbps = o.rates.nvme_write_gbps = 100;
  auto fast = SearchLayouts(g, base, o);
  REQUIRE(fast.ok());
  const Layout& best = swapped->layouts[0];
  for (const Layout& f : fast->layouts)
    if (f.Name() == best.Name()) {
      INFO(best.Name() << ": " << best.prediction.step_ms << " ms at 1 GB/s, "
                       << f.prediction.step_ms << " at 100");
      CHECK(f.prediction.step_ms < best.prediction.step_ms);
    }
  // The choice reaches the workers: device auto becomes nvme (or none), with a sub-group small
  // enough for the swap buffers to stay below the states.
  config::JobConfig job;
  job.zero.offload_optimizer.device = config::OffloadDevice::kAuto;
  job.zero.offload_param.device = config::OffloadDevice::kAuto;
  const std::string spec = LayoutSpec(best);
  CHECK(spec.find(" offload=" + std::to_string(best.offload)) != std::string::npos);
  REQUIRE(ApplyLayoutSpec(spec, &job).ok());
  CHECK(job.zero.offload_optimizer.device == config::OffloadDevice::kNvme);
  CHECK(job.zero.offload_param.device ==
        (best.offload == 2 ? config::OffloadDevice::kNvme : config::OffloadDevice::kNone));
  CHECK(job.zero.sub_group_size == kAutoSubGroupSize);
  config::JobConfig none;
  none.zero.offload_optimizer.device = config::OffloadDevice::kAuto;
  Layout in_ram = best;
  in_ram.offload = 0;
  REQUIRE(ApplyLayoutSpec(LayoutSpec(in_ram), &none).ok());
  CHECK(none.zero.offload_optimizer.device == config::OffloadDevice::kNone);
}

TEST_CASE("RunAutoPlan: bad input is one error naming it", "[planner][auto]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string job = dir + "/auto.yaml";
  std::ofstream(job) << "train_batch_size: 8\n"
                        "model: {family: gpt2, n_layer: 2, n_embd: 64, n_head: 4, vocab_size: "
                        "256, max_seq_len: 64}\n"
                        "data: {train: none.tok, seq_len: 64}\n";
  AutoRequest q;
  q.job = job;
  q.rates = dir + "/missing-rates.json";
  q.node_slots = {2};
  auto missing = RunAutoPlan(q);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("ds-worker calibrate --threads") != std::string::npos);
  q.node_slots = {};
  auto nodes = RunAutoPlan(q);
  REQUIRE_FALSE(nodes.ok());
  CHECK(nodes.status().message().find("--auto needs the nodes") != std::string::npos);
  auto list = ParseIntList("2,x", "--node-slots");
  REQUIRE_FALSE(list.ok());
  CHECK(list.status().message() == "--node-slots \"2,x\": not a list of counts like 2,2");
}

// `plan --auto` without agents: the table's loopback rate prices both link classes, and the
// note says so; a given link between nodes (--inter-link) is priced, and a slow one moves the
// choice to a layout that sends less across.
TEST_CASE("ChooseLayout: a given link between nodes is priced; without one the note says so",
          "[planner][auto]") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string job_path = dir + "/links.yaml", rates_path = dir + "/links-rates.json";
  std::ofstream(job_path) << "train_batch_size: 8\n"
                             "model: {family: gpt2, n_layer: 4, n_embd: 128, n_head: 4, "
                             "vocab_size: 256, max_seq_len: 64}\n"
                             "data: {train: none.tok, seq_len: 64}\n";
  std::ofstream(rates_path) << HostRatesToJson(Rates(20)).Dump();
  auto job = config::LoadJobConfig(job_path);
  REQUIRE(job.ok());
  AutoRequest q;
  q.job = job_path;
  q.rates = rates_path;
  q.node_slots = {2, 2};
  auto table = ChooseLayout(*job, q);
  REQUIRE(table.ok());
  CHECK(table->rates_note.find("both link classes at this host's loopback rate") !=
        std::string::npos);
  q.inter_link = LinkRate{30, 0.001};  // 1 MB/s between the nodes
  q.link_source = "as given";
  auto slow = ChooseLayout(*job, q);
  REQUIRE(slow.ok());
  CHECK(slow->rates_note.find("links as given") != std::string::npos);
  CHECK(slow->layout.prediction.step_ms > table->layout.prediction.step_ms);
  CHECK(slow->layout.prediction.inter_bytes < table->layout.prediction.inter_bytes);
  auto parsed = ParseLinkRate("12.5@20", "--inter-link");
  REQUIRE(parsed.ok());
  CHECK(parsed->gbps == 12.5);
  CHECK(parsed->latency_us == 20);
  auto bad = ParseLinkRate("fast", "--inter-link");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--inter-link \"fast\": not a rate like 12.5") !=
        std::string::npos);
}

}  // namespace
}  // namespace ds::planner
