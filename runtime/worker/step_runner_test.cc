// StepRunner on hand-made plans, without a Trainer: a fake compute (StepCompute) that writes
// known gradients, ranks as threads over the loopback communicator wrapped in one that records
// every operation and holds the first one back. Checks dispatch (every kind reaches its
// handler, an unknown one is refused naming it), the async/wait protocol (backward overlaps an
// async reduction; the instruction whose wait_for names it sees it complete) and the order of
// collectives (plan order, the same on every rank), and the reduced values.
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "proto/plan.pb.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/planner/plan_test_util.h"
#include "runtime/worker/step_runner.h"
#include "zero/optimizer.h"
#include "zero/shard_layout.h"

namespace ds::worker {
namespace {

using proto::Instruction;

// One rank's events in order: compute calls and the communicator's begin / end of each op.
struct Timeline {
  std::mutex mu;
  std::vector<std::string> events;
  void Add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  int IndexOf(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i] == e) return static_cast<int>(i);
    return -1;
  }
};

// Runs every operation on `inner` (its sync API), recording it; the first one waits 150 ms.
class RecordingComm final : public parallel::Communicator {
 public:
  RecordingComm(parallel::Communicator* inner, Timeline* timeline)
      : Communicator(inner->rank(), inner->size(), "recording"),
        inner_(inner),
        timeline_(timeline) {}
  ~RecordingComm() override { StopCommThread(); }

 protected:
  Status Run(const parallel::CommOp& op) override {
    const std::string name = "comm " + std::to_string(op.seq) + " " + std::to_string(op.in.count);
    timeline_->Add(name + " begin");
    if (op.seq == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Status s = op.kind == parallel::CommOpKind::kAllReduce ? inner_->AllReduce(op.in, op.reduce)
               : op.kind == parallel::CommOpKind::kAllGather
                   ? inner_->AllGather(op.in, op.out)
                   : UnimplementedError("recording communicator: " + parallel::DescribeOp(op));
    timeline_->Add(name + " end");
    return s;
  }
  StatusOr<std::unique_ptr<Communicator>> RunSplit(const std::vector<int>&, const std::string&,
                                                   uint64_t) override {
    return UnimplementedError("no splits here");
  }
  void Poison(const Status& cause) override { inner_->Abort(cause.message()); }

 private:
  parallel::Communicator* inner_;
  Timeline* timeline_;
};

// Backward of blocks >= 1 writes g[i] = (rank + 1) * (i % 7 + 1) over the upper half of the
// flat gradients, of block 0 over the lower half; the loss is rank + 1.
class FakeCompute final : public StepCompute {
 public:
  FakeCompute(zero::ParamStore* params, int rank, Timeline* t)
      : params_(params), rank_(rank), t_(t) {}
  Status LoadMicrobatch(const Instruction&) override { return Log("load"); }
  Status Forward(uint64_t, const Instruction& in) override {
    return Log("forward " + std::to_string(in.first_block()) + "-" +
               std::to_string(in.last_block()));
  }
  float loss() const override { return static_cast<float>(rank_ + 1); }
  Status Backward(float, uint64_t, const Instruction& in) override {
    const int first = in.first_block(), last = in.last_block();
    const int64_t n = params_->total_elements(), half = n / 2;
    float* g = static_cast<float*>(params_->FlatGradPtr(0));
    for (int64_t i = first == 0 ? 0 : half; i < (first == 0 ? half : n); ++i)
      g[i] = static_cast<float>((rank_ + 1) * (i % 7 + 1));
    return Log("backward " + std::to_string(first) + "-" + std::to_string(last));
  }
  Status FinishGradients() override { return Log("finish"); }

 private:
  Status Log(const std::string& e) {
    t_->Add(e);
    return OkStatus();
  }
  zero::ParamStore* params_;
  int rank_;
  Timeline* t_;
};

Instruction Make(Instruction::Kind kind, proto::Placement where = proto::HOST) {
  Instruction in;
  in.set_kind(kind);
  in.set_micro_batch(-1);
  in.set_placement(where);
  return in;
}

Instruction Collective(Instruction::Kind kind, int64_t lo, int64_t n, proto::Placement where,
                       bool async) {
  Instruction in = Make(kind);
  proto::ParamRange* r = in.add_ranges();
  r->set_offset(lo);
  r->set_count(n);
  proto::Collective* c = in.mutable_collective();
  c->set_count(n);
  c->set_dtype(proto::DT_F32);
  c->set_placement(where);
  c->set_staging_in(-1);
  c->set_staging_out(-1);
  in.set_async(async);
  return in;
}

// Stage 0, fp32: backward in two pieces, each followed by the async all-reduce of the half it
// wrote; the norm waits for both; step; the loss.
proto::Plan HandMadePlan(int world, int64_t flat, int blocks) {
  proto::Plan plan;
  plan.mutable_topology()->set_world(world);
  plan.mutable_topology()->set_dp(world);
  plan.mutable_settings()->set_model_dtype(proto::DT_F32);
  plan.mutable_settings()->set_comm_dtype(proto::DT_F32);
  plan.mutable_settings()->set_gradient_accumulation_steps(1);
  const proto::Placement comm = world == 1 ? proto::LOCAL : proto::HOST;
  const int64_t half = flat / 2, chunk = (flat + world - 1) / world;
  for (int r = 0; r < world; ++r) {
    proto::RankPlan* rp = plan.add_ranks();
    rp->set_rank(r);
    auto add = [rp](Instruction in) { *rp->add_instructions() = std::move(in); };
    add(Make(Instruction::ZERO_GRADS));
    Instruction load = Make(Instruction::LOAD_MICROBATCH);
    load.set_micro_batch(0);
    add(load);
    Instruction fwd = Make(Instruction::FORWARD);
    fwd.set_first_block(0);
    fwd.set_last_block(blocks);
    fwd.set_computes_loss(true);
    add(fwd);
    Instruction bwd = Make(Instruction::BACKWARD);
    bwd.set_mean_over(world);  // gas 1 x dp
    bwd.set_first_block(1);
    bwd.set_last_block(blocks);
    bwd.set_computes_loss(true);
    add(bwd);
    add(Collective(Instruction::ALL_REDUCE, half, flat - half, comm, true));  // 4
    bwd.set_first_block(0);
    bwd.set_last_block(0);
    bwd.set_computes_loss(false);
    add(bwd);
    add(Collective(Instruction::ALL_REDUCE, 0, half, comm, true));  // 6
    Instruction norm = Collective(Instruction::GRAD_NORM_REDUCE, r * chunk,
                                  std::min(flat, (r + 1) * chunk) - r * chunk, comm, false);
    norm.add_wait_for(4);
    norm.add_wait_for(6);
    add(norm);
    add(Make(Instruction::OPTIMIZER_STEP));
    Instruction loss = Collective(Instruction::LOSS_REDUCE, 0, 4, comm, false);
    loss.clear_ranges();
    loss.set_mean_over(1);  // gas
    add(loss);
  }
  return plan;
}

struct RankState {
  explicit RankState(const Graph& g, const proto::Plan& plan, int rank)
      : params(g, DType::kF32), scaler(optim::LossScalerOptions()) {
    params.Shard(zero::LayoutFor(plan, rank, params.total_elements()));
    optimizer = std::make_unique<zero::Optimizer>(zero::OptimizerOptions(), &params);
    schedule =
        std::make_unique<optim::LrSchedule>(*optim::LrSchedule::Create(optim::LrScheduleOptions()));
  }
  zero::ParamStore params;
  optim::LossScaler scaler;
  std::unique_ptr<zero::Optimizer> optimizer;
  std::unique_ptr<optim::LrSchedule> schedule;
  Timeline timeline;
  std::vector<std::string> comm_ops;
  StatusOr<StepResult> result = InternalError("not run");
};

// Runs one step of `plan` on every rank (threads); returns the ranks' states.
std::vector<std::unique_ptr<RankState>> RunStep(const Graph& g, const proto::Plan& plan) {
  const int world = plan.topology().world();
  auto group = parallel::LoopbackCommunicator::CreateGroup(world);
  std::vector<std::unique_ptr<RankState>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<RankState>(g, plan, r));
  auto run = [&](int r) {
    RankState& s = *ranks[r];
    RecordingComm comm(group[r].get(), &s.timeline);
    FakeCompute compute(&s.params, r, &s.timeline);
    StepParts parts;
    parts.compute = &compute;
    parts.params = &s.params;
    parts.optimizer = s.optimizer.get();
    parts.scaler = &s.scaler;
    parts.schedule = s.schedule.get();
    parts.comm = &comm;
    auto runner = StepRunner::Create(&plan, r, parts);
    if (!runner.ok()) return void(s.result = runner.status());
    s.result = (*runner)->Run(0);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(run, r);
  for (std::thread& t : threads) t.join();
  return ranks;
}

TEST_CASE("StepRunner: dispatch, async waits and collective order on a hand-made plan",
          "[worker][runner]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  const int64_t flat = zero::ParamStore(g, DType::kF32).total_elements();
  const proto::Plan plan = HandMadePlan(2, flat, 2);
  auto ranks = RunStep(g, plan);
  const int64_t half = flat / 2;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    RankState& s = *ranks[r];
    REQUIRE(s.result.ok());
    CHECK(s.result->loss == Approx(1.5));  // (1 + 2) / 2 over the group
    // Every compute call in plan order, gradients landed before each collective.
    const std::vector<std::string> compute = {
        "finish",       "load",   "forward 0-2", "backward 1-2", "finish",
        "backward 0-0", "finish", "finish",      "finish",       "finish"};
    std::vector<std::string> seen;
    for (const std::string& e : s.timeline.events)
      if (e.rfind("comm", 0) != 0) seen.push_back(e);
    CHECK(seen == compute);
    // The first all-reduce is held back 150 ms: backward of block 0 runs while it is in flight,
    // and the norm (comm 2: an all-gather of each rank's fp64 sum, two floats) starts only after
    // both reductions completed.
    const std::string first = "comm 0 " + std::to_string(flat - half),
                      second = "comm 1 " + std::to_string(half);
    CHECK(s.timeline.IndexOf("backward 0-0") < s.timeline.IndexOf(first + " end"));
    CHECK(s.timeline.IndexOf(first + " end") < s.timeline.IndexOf("comm 2 2 begin"));
    CHECK(s.timeline.IndexOf(second + " end") < s.timeline.IndexOf("comm 2 2 begin"));
    CHECK(s.timeline.IndexOf("comm 3 4 end") >= 0);  // the loss, its count and the aux, last
    // Reduced in place: the sum over both ranks.
    const float* grad = static_cast<const float*>(s.params.GradAt(0));
    bool all = true;
    double sum_sq = 0;
    for (int64_t i = 0; i < flat; ++i) {
      all = all && grad[i] == static_cast<float>(3 * (i % 7 + 1));
      sum_sq += double(grad[i]) * grad[i];
    }
    CHECK(all);
    CHECK(s.result->grad_norm == Approx(std::sqrt(sum_sq)).epsilon(1e-6));
  }
}

// A pipeline's earlier stages compute no loss (or a part of it): the reported loss is the sum
// over the ranks divided by those that computed a whole one, on every rank.
TEST_CASE("StepRunner: the loss is the mean over the ranks that computed one", "[worker][runner]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  proto::Plan plan = HandMadePlan(2, zero::ParamStore(g, DType::kF32).total_elements(), 2);
  for (Instruction& in : *plan.mutable_ranks(0)->mutable_instructions())
    in.set_computes_loss(false);
  auto ranks = RunStep(g, plan);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(ranks[r]->result.ok());
    CHECK(ranks[r]->result->loss == 2.0);  // rank 1's (its loss is rank + 1)
  }
  // A stage before the last whose loss is a part (its MoE layers' aux terms): added to the last
  // stage's, without counting as a loss of its own.
  plan = HandMadePlan(2, zero::ParamStore(g, DType::kF32).total_elements(), 2);
  for (Instruction& in : *plan.mutable_ranks(0)->mutable_instructions())
    if (in.kind() == Instruction::LOSS_REDUCE) in.set_loss_part(true);
  ranks = RunStep(g, plan);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ", rank 0's loss a part");
    REQUIRE(ranks[r]->result.ok());
    CHECK(ranks[r]->result->loss == 3.0);  // 1 + 2 over one whole loss
  }
}

TEST_CASE("StepRunner: one rank communicates nothing (LOCAL placements)", "[worker][runner]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  const int64_t flat = zero::ParamStore(g, DType::kF32).total_elements();
  auto ranks = RunStep(g, HandMadePlan(1, flat, 2));
  RankState& s = *ranks[0];
  REQUIRE(s.result.ok());
  CHECK(s.result->loss == Approx(1.0));
  for (const std::string& e : s.timeline.events) CHECK(e.rfind("comm", 0) != 0);
  CHECK(static_cast<const float*>(s.params.GradAt(0))[8] == 2.0f);  // (0 + 1) * (8 % 7 + 1)
}

TEST_CASE("StepRunner: an instruction kind without a handler is refused, naming it",
          "[worker][runner]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  proto::Plan plan = HandMadePlan(1, zero::ParamStore(g, DType::kF32).total_elements(), 2);
  Instruction unknown = Make(Instruction::KIND_UNSPECIFIED);
  *plan.mutable_ranks(0)->mutable_instructions(1) = unknown;
  auto ranks = RunStep(g, plan);
  REQUIRE_FALSE(ranks[0]->result.ok());
  CHECK(ranks[0]->result.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(ranks[0]->result.status().message(),
             Catch::Contains("instruction 1 KIND_UNSPECIFIED"));
}

TEST_CASE("StepRunner: device placements without device states are refused at creation",
          "[worker][runner]") {
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  proto::Plan plan = HandMadePlan(1, zero::ParamStore(g, DType::kF32).total_elements(), 2);
  plan.mutable_ranks(0)->mutable_instructions(8)->set_placement(proto::DEVICE);
  auto ranks = RunStep(g, plan);
  REQUIRE_FALSE(ranks[0]->result.ok());
  CHECK_THAT(ranks[0]->result.status().message(), Catch::Contains("on the device"));
}

}  // namespace
}  // namespace ds::worker
