// The step runner on planned pipeline streams (runtime/plan/pipe_streams.h), ranks as threads
// over loopback link groups: every SEND and RECV runs on its link's thread, async, and the
// waits keep each activation slot until its data landed. A fake compute passes a value down the
// virtual stages (each forward adds 1 to what it received, the first starts from 1000 x micro)
// and the gradient back up (each backward adds 1): the last stage must see every micro-batch's
// own value after p x v - 1 steps, and the first its own gradient, for 1F1B and interleaved
// schedules with several micro-batches in flight per slot pool.
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <thread>

#include "parallel/comm/loopback_communicator.h"
#include "parallel/pipeline/pipe_streams.h"
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
constexpr int kIn = 0, kOut = 3, kGradIn = 7;  // the boundary tensors' ids in every stage graph
constexpr int64_t kCount = 64;

// Per (chunk, slot, tensor, grad): a buffer; forward and backward as the header says.
class PipeCompute final : public StepCompute {
 public:
  PipeCompute(int rank, int stages, int chunks) : rank_(rank), p_(stages), v_(chunks) {}
  Status LoadMicrobatch(const Instruction&) override { return OkStatus(); }
  Status Forward(uint64_t, const Instruction& in) override {
    const int vs = in.chunk() * p_ + rank_;
    const float x = vs == 0 ? 1000.0f * in.micro_batch() : Buf(in, kIn, false)[0];
    for (int64_t i = 0; i < kCount; ++i) {
      if (vs > 0 && Buf(in, kIn, false)[i] != x) return InternalError("a torn activation");
      Buf(in, kOut, false)[i] = x + 1;
    }
    if (vs == p_ * v_ - 1) seen_forward[in.micro_batch()] = x;
    return OkStatus();
  }
  float loss() const override { return 0; }
  Status Backward(float, uint64_t, const Instruction& in) override {
    const int vs = in.chunk() * p_ + rank_;
    const float g = vs == p_ * v_ - 1 ? 1000.0f * in.micro_batch() : Buf(in, kGradIn, false)[0];
    for (int64_t i = 0; i < kCount && vs > 0; ++i) Buf(in, kIn, true)[i] = g + 1;
    if (vs == 0) seen_backward[in.micro_batch()] = g;
    return OkStatus();
  }
  Status FinishGradients() override { return OkStatus(); }
  StatusOr<parallel::BufferView> TensorData(const Instruction& in, int tensor, bool grad,
                                            int64_t count) override {
    if (count != kCount) return InvalidArgumentError("count");
    return parallel::BufferView(Buf(in, tensor, grad), count);
  }
  std::map<int, float> seen_forward, seen_backward;  // per micro-batch

 private:
  float* Buf(const Instruction& in, int tensor, bool grad) {
    std::vector<float>& b = bufs_[{in.chunk(), in.slot(), tensor, grad}];
    b.resize(kCount);
    return b.data();
  }
  int rank_, p_, v_;
  std::map<std::tuple<int, int, int, bool>, std::vector<float>> bufs_;
};

void RunPipeline(const parallel::PipeOrders& o) {
  const int p = o.stages, stages = p * o.chunks, m = o.micro_batches;
  std::vector<parallel::PipeBoundary> b(stages - 1,
                                        parallel::PipeBoundary{{kOut}, {kIn}, {kGradIn}, {kCount}});
  auto streams = parallel::PipelineStreams(o, b, std::vector<int>(stages, 4));
  REQUIRE(streams.ok());
  proto::Plan plan;
  plan.mutable_topology()->set_world(p);
  plan.mutable_topology()->set_dp(1);
  plan.mutable_settings()->set_gradient_accumulation_steps(m);
  plan.mutable_settings()->set_comm_dtype(proto::DT_F32);
  plan.mutable_settings()->set_model_dtype(proto::DT_F32);
  for (int r = 0; r < p; ++r) {
    proto::RankPlan* rp = plan.add_ranks();
    rp->set_rank(r);
    for (const Instruction& in : streams->ranks[r]) *rp->add_instructions() = in;
  }
  // One loopback pair per link name, member 0 the lower pipeline rank.
  std::map<std::string, std::vector<std::unique_ptr<parallel::Communicator>>> links;
  for (int a = 0; a < p; ++a)
    for (int c : {a + 1, a - 1, 0, p - 1})
      if (c >= 0 && c < p && c != a && !links.count(parallel::PipeLinkName(a, c)))
        for (auto [x, y] : {std::pair{a, c}, std::pair{c, a}})
          links[parallel::PipeLinkName(x, y)] = parallel::LoopbackCommunicator::CreateGroup(2);
  const Graph g = planner::testing::PresetGraph("gpt2-tiny");
  std::vector<std::unique_ptr<PipeCompute>> computes;
  std::vector<Status> status(p);
  for (int r = 0; r < p; ++r) computes.push_back(std::make_unique<PipeCompute>(r, p, o.chunks));
  auto run = [&](int r) {
    zero::ParamStore params(g, DType::kF32);
    params.Shard(zero::LayoutFor(plan, r, params.total_elements()));
    zero::Optimizer optimizer(zero::OptimizerOptions(), &params);
    optim::LossScaler scaler{optim::LossScalerOptions()};
    auto schedule = optim::LrSchedule::Create(optim::LrScheduleOptions());
    auto self = parallel::LoopbackCommunicator::CreateGroup(1);
    StepParts parts;
    parts.compute = computes[r].get();
    parts.params = &params;
    parts.optimizer = &optimizer;
    parts.scaler = &scaler;
    parts.schedule = &*schedule;
    parts.comm = self[0].get();
    for (auto& [name, pair] : links) {
      const size_t at = name.find('.') + 1, dash = name.find('-');
      const int x = std::stoi(name.substr(at, dash - at)), y = std::stoi(name.substr(dash + 1));
      if (r == x || r == y) parts.groups[name] = pair[r == std::min(x, y) ? 0 : 1].get();
    }
    auto runner = StepRunner::Create(&plan, r, parts);
    if (!runner.ok()) return void(status[r] = runner.status());
    status[r] = (*runner)->Run(0).status();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back(run, r);
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << status[r].ToString());
    REQUIRE(status[r].ok());
  }
  const int last = (stages - 1) % p;
  for (int i = 0; i < m; ++i) {
    INFO("micro-batch " << i);
    CHECK(computes[last]->seen_forward.at(i) == 1000.0f * i + (stages - 1));
    CHECK(computes[0]->seen_backward.at(i) == 1000.0f * i + (stages - 1));
  }
}

TEST_CASE("StepRunner: pipeline streams move every micro-batch through every stage",
          "[worker][runner][pipe]") {
  for (auto [p, m] : {std::pair{2, 4}, std::pair{3, 6}, std::pair{4, 8}}) {
    INFO("p " << p << ", m " << m);
    auto one = parallel::BuildPipelineSchedule(plan::PipeScheduleKind::k1F1B, p, m);
    REQUIRE(one.ok());
    RunPipeline(*one);
    auto inter = parallel::BuildPipelineSchedule(plan::PipeScheduleKind::kInterleaved, p, m, 2);
    REQUIRE(inter.ok());
    RunPipeline(*inter);
  }
}

}  // namespace
}  // namespace ds::worker
