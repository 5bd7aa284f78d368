// A pipeline step end to end in process: the stage graphs (runtime/plan/pipe_graph.h) of Llama
// (untied embeddings) and GPT-2 (tied), one executor per chunk and activation slot
// (PipelineCompute), the planned streams (runtime/plan/pipe_streams.h) run by StepRunner on
// threads over loopback links, the data read by every stage. The last stage's mean loss over
// the micro-batches equals the whole graph's run over the same micro-batches bit for bit, and
// so does every parameter gradient accumulated over them (a tied embedding's two halves add
// up to the whole's within 1e-6 of its largest element: the same sums in another order), for
// 1F1B at 2 and 4 stages and interleaved (2 ranks x 2 chunks).
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <thread>

#include "parallel/comm/loopback_communicator.h"
#include "parallel/pipeline/pipe_graph.h"
#include "parallel/pipeline/pipe_streams.h"
#include "proto/plan.pb.h"
#include "runtime/data/data_loader.h"
#include "runtime/graph/model_builder.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/worker/pipe_compute.h"
#include "runtime/worker/step_runner.h"
#include "runtime/worker/trainer_testing.h"
#include "zero/optimizer.h"
#include "zero/shard_layout.h"

namespace ds::worker {
namespace {

using proto::Instruction;
using Named = std::map<std::string, std::vector<float>>;
constexpr int kBatch = 2, kSeq = 8;

data::DataLoaderOptions Loader(const std::string& path) {
  data::DataLoaderOptions o;
  o.path = path;
  o.batch = kBatch;
  o.seq = kSeq;
  o.shuffle = false;
  return o;
}

void AddGrads(const zero::ParamStore& p, Named* out) {
  for (const zero::ParamSlot& s : p.slots()) {
    const float* g = static_cast<const float*>(p.FlatGradPtr(s.offset));
    std::vector<float>& to = (*out)[s.name];
    if (to.empty()) to.assign(s.numel, 0.0f);
    for (int64_t i = 0; i < s.numel; ++i) to[i] += g[i];
  }
}

// The whole graph over m micro-batches: the mean loss and the accumulated gradients.
float Whole(const Graph& g, const std::string& data, int m, Named* grads) {
  zero::ParamStore params(g, DType::kF32);
  params.Initialize(g, 42, {});
  auto ex = exec::Executor::Create(g, &params, {kBatch, kSeq, true});
  REQUIRE(ex.ok());
  auto loader = data::DataLoader::Open(Loader(data));
  REQUIRE(loader.ok());
  double sum = 0;
  for (int i = 0; i < m; ++i) {
    REQUIRE((*loader)->Next((*ex)->ids(), (*ex)->targets()).ok());
    REQUIRE((*ex)->Forward(0).ok());
    sum += (*ex)->loss();
    REQUIRE((*ex)->Backward(static_cast<float>(1.0 / m), 0).ok());
  }
  AddGrads(params, grads);
  return static_cast<float>(sum / m);
}

struct Stage {  // one virtual stage's parameters and its slots' executors
  std::unique_ptr<zero::ParamStore> params;
  std::vector<std::unique_ptr<exec::Executor>> slots;
};

Stage MakeStage(const Graph& whole_graph, const parallel::PipeStageGraph& s, int slots) {
  zero::ParamStore whole(whole_graph, DType::kF32);
  whole.Initialize(whole_graph, 42, {});
  Stage st;
  st.params = std::make_unique<zero::ParamStore>(s.graph, DType::kF32);
  std::vector<float> full(st.params->total_elements());
  for (const zero::ParamSlot& slot : st.params->slots())
    for (const zero::ParamSlot& w : whole.slots())
      if (w.name == slot.name)
        std::copy(whole.master_data() + w.offset, whole.master_data() + w.offset + w.numel,
                  full.begin() + slot.offset);
  st.params->SetFromFull(full.data());
  for (int k = 0; k < slots; ++k) {
    auto e = exec::Executor::Create(s.graph, st.params.get(), {kBatch, kSeq, true});
    REQUIRE(e.ok());
    st.slots.push_back(std::move(e).value());
  }
  return st;
}

void CheckPipeline(const Graph& g, plan::PipeScheduleKind kind, int p, int v, int m, bool tied) {
  INFO(g.name << ", " << plan::PipeScheduleName(kind) << ", p " << p << ", v " << v);
  const std::string data = testing::WriteTinyTokens("pipe_compute.tok");
  Named want;
  const float want_loss = Whole(g, data, m, &want);
  auto stages = parallel::PartitionStages(g, p * v, "uniform");
  REQUIRE(stages.ok());
  auto graphs = parallel::StageGraphs(g, *stages, {kBatch, kSeq});
  REQUIRE(graphs.ok());
  auto orders = parallel::BuildPipelineSchedule(kind, p, m, v);
  REQUIRE(orders.ok());
  std::vector<parallel::PipeBoundary> bounds;
  std::vector<int> nodes;
  for (size_t s = 0; s < graphs->size(); ++s) {
    nodes.push_back(static_cast<int>((*graphs)[s].graph.nodes.size()));
    if (s + 1 == graphs->size()) break;
    const parallel::PipeStageGraph &a = (*graphs)[s], &b = (*graphs)[s + 1];
    parallel::PipeBoundary bd{a.send, b.recv, a.send_grad, {}};
    for (size_t k = 0; k < a.send.size(); ++k) bd.count.push_back(int64_t{kBatch} * kSeq * 32);
    bounds.push_back(bd);
  }
  auto streams = parallel::PipelineStreams(*orders, bounds, nodes);
  REQUIRE(streams.ok());
  proto::Plan plan;
  plan.mutable_topology()->set_world(p);
  plan.mutable_topology()->set_dp(1);
  plan.mutable_settings()->set_gradient_accumulation_steps(m);
  plan.mutable_settings()->set_comm_dtype(proto::DT_F32);
  plan.mutable_settings()->set_model_dtype(proto::DT_F32);
  const int last = (p * v - 1) % p;
  for (int r = 0; r < p; ++r) {
    proto::RankPlan* rp = plan.add_ranks();
    rp->set_rank(r);
    for (const Instruction& in : streams->ranks[r]) *rp->add_instructions() = in;
    if (r != last) continue;
    Instruction loss;  // the last stage's mean over its micro-batches, over a group of one
    loss.set_kind(Instruction::LOSS_REDUCE);
    loss.set_micro_batch(-1);
    loss.set_mean_over(m);
    loss.set_placement(proto::HOST);
    proto::Collective* c = loss.mutable_collective();
    c->set_count(4);
    c->set_dtype(proto::DT_F32);
    c->set_placement(proto::HOST);
    c->set_bucket(-1);
    c->set_staging_in(-1);
    c->set_staging_out(-1);
    *rp->add_instructions() = loss;
  }
  std::map<std::string, std::vector<std::unique_ptr<parallel::Communicator>>> links;
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b)
      if (a != b)
        links[parallel::PipeLinkName(a, b)] = parallel::LoopbackCommunicator::CreateGroup(2);
  // Per virtual stage s = chunk x p + rank.
  std::vector<Stage> st;
  for (int s = 0; s < p * v; ++s)
    st.push_back(MakeStage(g, (*graphs)[s], streams->slots[s % p][s / p]));
  std::vector<StatusOr<StepResult>> results(p, InternalError("not run"));
  const zero::ParamStore unused_params(g, DType::kF32);
  auto run = [&](int r) {
    std::vector<std::vector<exec::Executor*>> ex(v);
    for (int c = 0; c < v; ++c)
      for (auto& e : st[c * p + r].slots) ex[c].push_back(e.get());
    auto loader = data::DataLoader::Open(Loader(data));
    if (!loader.ok()) return void(results[r] = loader.status());
    PipelineCompute compute(ex, loader->get());
    zero::ParamStore& params = *st[r].params;  // the runner's ZeRO parts (stage 0: no shards)
    params.Shard(zero::LayoutFor(plan, r, params.total_elements()));
    zero::Optimizer optimizer(zero::OptimizerOptions(), &params);
    optim::LossScaler scaler{optim::LossScalerOptions()};
    auto schedule = optim::LrSchedule::Create(optim::LrScheduleOptions());
    auto self = parallel::LoopbackCommunicator::CreateGroup(1);
    StepParts parts;
    parts.compute = &compute;
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
    if (!runner.ok()) return void(results[r] = runner.status());
    results[r] = (*runner)->Run(0);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back(run, r);
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << results[r].status().ToString());
    REQUIRE(results[r].ok());
  }
  CHECK(results[last]->loss == want_loss);
  Named got;
  for (int s = p * v - 1; s >= 0; --s) AddGrads(*st[s].params, &got);
  REQUIRE(got.size() == want.size());
  for (const auto& [name, grad] : want) {
    INFO(name);
    const std::vector<float>& mine = got.at(name);
    if (!tied || name != "wte") {
      CHECK(mine == grad);
      continue;
    }
    // The whole graph adds head and embedding parts micro-batch by micro-batch, the stages
    // each their own part first: the same sums in another order.
    double worst = 0, largest = 0;
    for (size_t i = 0; i < grad.size(); ++i) {
      worst = std::max(worst, std::abs(double(mine[i]) - grad[i]));
      largest = std::max(largest, std::abs(double(grad[i])));
    }
    CHECK(worst <= 1e-6 * largest);
  }
}

Graph Build(const std::string& family) {
  ModelSpec spec;
  spec.family = family;
  spec.n_layer = 4;
  spec.n_embd = 32;
  spec.n_head = 4;
  spec.n_kv_head = family == "llama" ? 2 : 0;
  spec.vocab_size = 32;
  spec.max_seq_len = 16;
  auto g = BuildModelGraph(spec);
  REQUIRE(g.ok());
  return std::move(g).value();
}

TEST_CASE("PipelineCompute: a planned pipeline step is the whole graph's", "[worker][pipe]") {
  const Graph llama = Build("llama"), gpt = Build("gpt2");
  CheckPipeline(llama, plan::PipeScheduleKind::k1F1B, 2, 1, 4, false);
  CheckPipeline(llama, plan::PipeScheduleKind::k1F1B, 4, 1, 6, false);
  CheckPipeline(llama, plan::PipeScheduleKind::kInterleaved, 2, 2, 4, false);
  CheckPipeline(gpt, plan::PipeScheduleKind::k1F1B, 2, 1, 4, true);
}

}  // namespace
}  // namespace ds::worker
