// TensorParallelGraph against the whole graph: every tp rank runs its graph with the all-reduces
// at the cut points (ranks as threads over the loopback communicator), and the loss equals the
// single graph's within 1e-6 and every parameter gradient is the slice of the single graph's
// within 1e-5 (GPT-2 with tied embeddings and biases, Llama with grouped-query attention), from
// weights initialized whole and sliced; with sequence parallelism too (all-gathers and
// reduce-scatters at the cuts, the chunk parameters' gradients summed). Bad partitions are
// refused naming the node.
#include <cmath>
#include <thread>

#include <catch2/catch.hpp>

#include "parallel/comm/loopback_communicator.h"
#include "parallel/tensor/tp_graph.h"
#include "runtime/exec/executor.h"
#include "runtime/graph/model_builder.h"
#include "zero/param_store.h"

namespace ds::parallel {
namespace {

struct Result {
  float loss = 0;
  std::vector<float> grads;  // flat, the ParamStore's layout
};

void Fill(exec::Executor* ex, int64_t vocab) {
  for (int64_t i = 0; i < ex->batch() * ex->seq(); ++i) {
    ex->ids()[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    ex->targets()[i] = static_cast<int32_t>((i * 5 + 1) % vocab);
  }
  ex->targets()[3] = -100;  // an ignored position
}

// Forward and backward of `g` over `comm` at the cuts of `local` (null: the whole graph).
Result RunGraph(const Graph& g, const TpLocalGraph* local, parallel::Communicator* comm) {
  zero::ParamStore params(g, DType::kF32);
  zero::InitSlicer slicer;
  slicer.full_numel = [local](int slot) {
    int64_t n = 1;
    for (int64_t d : local->shards[slot].full_shape) n *= d;
    return n;
  };
  slicer.take = [local](int slot, const float* full, float* mine) {
    TakeShard(local->shards[slot], full, mine);
  };
  params.Initialize(g, 42, {}, local ? &slicer : nullptr);
  auto ex = exec::Executor::Create(g, &params, {2, 8, true});
  REQUIRE(ex.ok());
  Fill(ex->get(), g.config.at("vocab_size"));
  const int n = static_cast<int>(g.nodes.size());
  auto reduce = [&](const TpCollective& c) {
    const Tensor t = (*ex)->TensorData(c.tensor, c.backward);
    REQUIRE(t.defined());
    if (c.kind == TpCollective::kAllReduce) {
      REQUIRE(comm->AllReduce(parallel::BufferView(t.f32(), t.numel()),
                              c.max ? parallel::ReduceOp::kMax : parallel::ReduceOp::kSum)
                  .ok());
      return;
    }
    const Tensor o = (*ex)->TensorData(c.out, c.backward);
    REQUIRE(o.defined());
    if (c.kind == TpCollective::kAllGather)
      REQUIRE(comm->AllGather(parallel::BufferView(t.f32(), t.numel()),
                              parallel::BufferView(o.f32(), o.numel()))
                  .ok());
    else
      REQUIRE(comm->ReduceScatter(parallel::BufferView(t.f32(), t.numel()),
                                  parallel::BufferView(o.f32(), o.numel()),
                                  parallel::ReduceOp::kSum)
                  .ok());
  };
  int at = 0;
  for (const TpCollective& c : local ? local->collectives : std::vector<TpCollective>()) {
    if (c.backward) continue;
    REQUIRE((*ex)->ForwardNodes(1, at, c.boundary).ok());
    reduce(c);
    at = c.boundary;
  }
  REQUIRE((*ex)->ForwardNodes(1, at, n).ok());
  at = n;
  for (const TpCollective& c : local ? local->collectives : std::vector<TpCollective>()) {
    if (!c.backward) continue;
    REQUIRE((*ex)->BackwardNodes(1.0f, 1, c.boundary, at).ok());
    reduce(c);
    at = c.boundary;
  }
  REQUIRE((*ex)->BackwardNodes(1.0f, 1, 0, at).ok());
  for (int t : local ? local->sp_params : std::vector<int>()) {  // sequence parallelism
    const zero::ParamSlot* slot = params.ForTensor(t);
    float* grad = static_cast<float*>(params.FlatGradPtr(slot->offset));
    REQUIRE(
        comm->AllReduce(parallel::BufferView(grad, slot->numel), parallel::ReduceOp::kSum).ok());
  }
  Result r;
  r.loss = (*ex)->loss();
  const float* grads = static_cast<const float*>(params.FlatGradPtr(0));
  r.grads.assign(grads, grads + params.total_elements());
  return r;
}

void CheckAgainstWhole(const ModelSpec& spec, int tp, bool sp = false) {
  auto full = BuildModelGraph(spec);
  REQUIRE(full.ok());
  const Result whole = RunGraph(*full, nullptr, nullptr);
  zero::ParamStore full_layout(*full, DType::kF32);
  auto comms = parallel::LoopbackCommunicator::CreateGroup(tp);
  std::vector<TpLocalGraph> locals;
  for (int r = 0; r < tp; ++r) {
    auto local = TensorParallelGraph(*full, tp, r, sp);
    REQUIRE(local.ok());
    locals.push_back(std::move(local).value());
  }
  std::vector<Result> results(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back(
        [&, r] { results[r] = RunGraph(locals[r].graph, &locals[r], comms[r].get()); });
  for (std::thread& t : threads) t.join();
  // Replicated key / value heads: each rank's gradient is its query heads' part, summed over the
  // ranks sharing the head (the plan's TP_GRAD_ALL_REDUCE on the kv group).
  const int share = locals[0].kv_share;
  if (share > 1) {
    zero::ParamStore layout(locals[0].graph, DType::kF32);
    std::vector<Result> summed = results;
    for (size_t i = 0; i < layout.slots().size(); ++i)
      for (const FlatPiece& p : LocalToFull(locals[0].shards[i], 0, layout.slots()[i].numel)) {
        if (p.box->share == 1) continue;
        const int64_t at = layout.slots()[i].offset + p.local;
        for (int r = 0; r < tp; ++r)
          for (int64_t k = 0; k < p.count; ++k) {
            float sum = 0;
            for (int q = r / share * share; q < (r / share + 1) * share; ++q)
              sum += results[q].grads[at + k];
            summed[r].grads[at + k] = sum;
          }
      }
    results = summed;
  }
  for (int r = 0; r < tp; ++r) {
    INFO(spec.family << " tp " << tp << (sp ? " sequence parallel" : "") << " rank " << r);
    CHECK(results[r].loss == Approx(whole.loss).epsilon(1e-6));
    zero::ParamStore mine(locals[r].graph, DType::kF32);
    for (size_t i = 0; i < mine.slots().size(); ++i) {
      const zero::ParamSlot& m = mine.slots()[i];
      std::vector<float> want(m.numel);
      TakeShard(locals[r].shards[i], whole.grads.data() + full_layout.slots()[i].offset,
                want.data());
      double worst = 0, scale = 1e-3;
      for (int64_t k = 0; k < m.numel; ++k) {
        worst = std::max<double>(worst, std::abs(results[r].grads[m.offset + k] - want[k]));
        scale = std::max<double>(scale, std::abs(want[k]));
      }
      INFO("gradient of " << m.name << ": largest difference " << worst << " of " << scale);
      CHECK(worst <= 1e-5 * scale);
    }
  }
}

TEST_CASE("TensorParallelGraph: GPT-2 ranks reproduce the whole graph's loss and gradients",
          "[plan][tp]") {
  ModelSpec s{"gpt2", 2, 32, 4, 0, 64, 16};
  for (int tp : {1, 2, 4}) CheckAgainstWhole(s, tp);
}

TEST_CASE("TensorParallelGraph: Llama with grouped-query attention", "[plan][tp]") {
  ModelSpec s{"llama", 2, 32, 4, 2, 64, 16};
  CheckAgainstWhole(s, 2);
  s.tie_embeddings = 1;  // the head shares the embedding's vocab rows
  CheckAgainstWhole(s, 2);
}

TEST_CASE("TensorParallelGraph: sequence parallelism, GPT-2 and Llama", "[plan][tp]") {
  CheckAgainstWhole({"gpt2", 2, 32, 4, 0, 64, 16}, 2, /*sp=*/true);
  CheckAgainstWhole({"gpt2", 2, 32, 4, 0, 64, 16}, 4, /*sp=*/true);
  CheckAgainstWhole({"llama", 2, 32, 4, 2, 64, 16}, 2, /*sp=*/true);
}

TEST_CASE("TensorParallelGraph: the cut points", "[plan][tp]") {
  auto g = BuildModelGraph({"gpt2", 1, 32, 4, 0, 64, 16});
  REQUIRE(g.ok());
  auto local = TensorParallelGraph(*g, 2, 1);
  REQUIRE(local.ok());
  // Forward: the embedding, two row-parallel outputs, the row max and the loss sums; backward:
  // the gradients of the three inputs of column-parallel linears (ln_1, ln_2, ln_f).
  std::vector<std::string> fwd, bwd;
  for (const TpCollective& c : local->collectives)
    (c.backward ? bwd : fwd).push_back(local->graph.tensors[c.tensor].name);
  CHECK(fwd == std::vector<std::string>{"tok_emb", "h.0.attn.proj.partial", "h.0.mlp.proj.partial",
                                        "loss.max", "loss.stats"});
  CHECK(bwd == std::vector<std::string>{"ln_f", "h.0.ln_2", "h.0.ln_1"});
  for (const NodeInfo& n : local->graph.nodes)
    if (n.op == "embedding") CHECK(n.attrs.Int("vocab_start", -1) == 32);
}

TEST_CASE("TensorParallelGraph: kv heads fewer than the tp ranks are replicated", "[plan][tp]") {
  CheckAgainstWhole({"llama", 2, 64, 8, 2, 64, 16}, 4);        // 2 ranks per kv head
  CheckAgainstWhole({"llama", 2, 64, 8, 1, 64, 16}, 4);        // multi-query: all 4 share it
  CheckAgainstWhole({"llama", 2, 64, 8, 2, 64, 16}, 4, true);  // with sequence parallelism
  auto g = BuildModelGraph({"llama", 1, 96, 12, 3, 64, 16});
  REQUIRE(g.ok());
  auto bad = TensorParallelGraph(*g, 4, 0);  // 3 kv heads over 4 ranks: neither divides
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("model.n_kv_head 3: one must divide"));
}

}  // namespace
}  // namespace ds::parallel
