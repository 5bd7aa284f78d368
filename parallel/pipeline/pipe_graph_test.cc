// StageGraphs against the whole graph: each stage's graph runs in its own executor, the
// activations copied forward at every boundary and their gradients copied back, as the plan's
// SEND and RECV will; the loss and every parameter gradient are the whole graph's bit for bit
// (GPT-2 with dropout and tied embeddings, whose two stages' gradients add up to the whole's;
// Llama with grouped-query attention), for 2, 3 and 4 stages. Tensors that would cross more
// than one boundary are refused naming them.
#include <catch2/catch.hpp>
#include <map>

#include "parallel/pipeline/pipe_graph.h"
#include "parallel/tensor/tp_graph.h"
#include "runtime/exec/executor.h"
#include "runtime/graph/model_builder.h"
#include "zero/param_store.h"

namespace ds::parallel {
namespace {

Graph Build(ModelSpec spec) {
  auto g = BuildModelGraph(spec);
  REQUIRE(g.ok());
  return std::move(g).value();
}

void Fill(exec::Executor* ex, int64_t vocab) {
  for (int64_t i = 0; i < ex->batch() * ex->seq(); ++i) {
    ex->ids()[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    ex->targets()[i] = static_cast<int32_t>((i * 5 + 1) % vocab);
  }
  ex->targets()[3] = -100;
}

// Per parameter name: its values or its gradient.
using Named = std::map<std::string, std::vector<float>>;

Named Grads(const zero::ParamStore& p) {
  Named out;
  for (const zero::ParamSlot& s : p.slots()) {
    const float* g = static_cast<const float*>(p.FlatGradPtr(s.offset));
    out[s.name].assign(g, g + s.numel);
  }
  return out;
}

void Copy(const Tensor& from, const Tensor& to) {
  REQUIRE(from.defined());
  REQUIRE(to.defined());
  REQUIRE(from.numel() == to.numel());
  std::copy(from.f32(), from.f32() + from.numel(), to.f32());
}

void CheckStages(const Graph& g, int k) {
  INFO(g.name << " over " << k << " stages");
  constexpr uint64_t kSeed = 7;
  zero::ParamStore whole_params(g, DType::kF32);
  whole_params.Initialize(g, 42, {});
  auto whole = exec::Executor::Create(g, &whole_params, {2, 8, true});
  REQUIRE(whole.ok());
  Fill(whole->get(), g.config.at("vocab_size"));
  REQUIRE((*whole)->Forward(kSeed).ok());
  REQUIRE((*whole)->Backward(1.0f, kSeed).ok());
  const Named want = Grads(whole_params);

  auto stages = PartitionStages(g, k, "uniform");
  REQUIRE(stages.ok());
  auto graphs = StageGraphs(g, *stages, {2, 8});
  REQUIRE(graphs.ok());
  std::vector<std::unique_ptr<zero::ParamStore>> params;
  std::vector<std::unique_ptr<exec::Executor>> ex;
  for (const PipeStageGraph& s : *graphs) {
    params.push_back(std::make_unique<zero::ParamStore>(s.graph, DType::kF32));
    std::vector<float> full(params.back()->total_elements());
    for (const zero::ParamSlot& slot : params.back()->slots()) {
      const zero::ParamSlot* from = nullptr;
      for (const zero::ParamSlot& w : whole_params.slots())
        if (w.name == slot.name) from = &w;
      REQUIRE(from != nullptr);
      std::copy(whole_params.master_data() + from->offset,
                whole_params.master_data() + from->offset + from->numel,
                full.begin() + slot.offset);
    }
    params.back()->SetFromFull(full.data());
    auto e = exec::Executor::Create(s.graph, params.back().get(), {2, 8, true});
    INFO((e.ok() ? "" : e.status().ToString()));
    REQUIRE(e.ok());
    Fill(e->get(), g.config.at("vocab_size"));
    ex.push_back(std::move(e).value());
  }
  for (int s = 0; s < k; ++s) {
    const PipeStageGraph& mine = (*graphs)[s];
    if (s > 0) {
      const PipeStageGraph& prev = (*graphs)[s - 1];
      REQUIRE(prev.send.size() == mine.recv.size());
      for (size_t i = 0; i < mine.recv.size(); ++i) {
        CHECK(prev.whole[prev.send[i]] == mine.whole[mine.recv[i]]);
        Copy(ex[s - 1]->TensorData(prev.send[i], false), ex[s]->TensorData(mine.recv[i], false));
      }
    }
    REQUIRE(ex[s]->Forward(kSeed).ok());
  }
  CHECK(ex.back()->loss() == (*whole)->loss());
  for (int s = k - 1; s >= 0; --s) {
    const PipeStageGraph& mine = (*graphs)[s];
    if (s < k - 1) {
      const PipeStageGraph& next = (*graphs)[s + 1];
      for (size_t i = 0; i < mine.send.size(); ++i)
        Copy(ex[s + 1]->TensorData(next.recv[i], true),
             ex[s]->TensorData(mine.send_grad[i], false));
    }
    REQUIRE(ex[s]->Backward(1.0f, kSeed).ok());
  }
  // Every gradient the whole's; a tied embedding's is the last stage's plus the first's.
  Named got;
  for (int s = k - 1; s >= 0; --s)
    for (auto& [name, grad] : Grads(*params[s])) {
      if (!got.count(name)) {
        got[name] = grad;
        continue;
      }
      for (size_t i = 0; i < grad.size(); ++i) got[name][i] += grad[i];
    }
  REQUIRE(got.size() == want.size());
  for (const auto& [name, grad] : want) {
    INFO(name);
    CHECK(got.at(name) == grad);
  }
}

TEST_CASE("StageGraphs: stages reproduce the whole graph's loss and gradients", "[plan][pipe]") {
  ModelSpec gpt;
  gpt.n_layer = 4;
  gpt.n_embd = 32;
  gpt.vocab_size = 40;
  gpt.max_seq_len = 16;
  gpt.dropout = 0.1f;
  ModelSpec llama = gpt;
  llama.family = "llama";
  llama.n_kv_head = 2;
  llama.dropout = 0;
  for (int k : {2, 3, 4}) {
    CheckStages(Build(gpt), k);
    CheckStages(Build(llama), k);
  }
}

TEST_CASE("StageGraphs: the boundaries and their refusals", "[plan][pipe]") {
  ModelSpec spec;
  spec.n_layer = 2;
  spec.n_embd = 32;
  spec.vocab_size = 40;
  spec.max_seq_len = 16;
  Graph g = Build(spec);
  auto stages = PartitionStages(g, 2, "uniform");
  REQUIRE(stages.ok());
  auto graphs = StageGraphs(g, *stages, {2, 8});
  REQUIRE(graphs.ok());
  // One residual stream crosses: stage 0 sends it, stage 1 receives it and sends its gradient.
  REQUIRE((*graphs)[0].send.size() == 1);
  CHECK((*graphs)[0].send_count == std::vector<int64_t>{2 * 8 * 32});
  CHECK((*graphs)[0].recv.empty());
  CHECK((*graphs)[1].send.empty());
  REQUIRE((*graphs)[1].recv.size() == 1);
  CHECK((*graphs)[0].graph.nodes.back().op == "pipe_send");
  CHECK((*graphs)[1].graph.nodes.front().op == "pipe_recv");
  CHECK((*graphs)[1].graph.loss >= 0);
  CHECK((*graphs)[1].whole[(*graphs)[1].graph.loss] == g.loss);
  // A block that reads a tensor two stages back.
  Graph skip = g;
  for (NodeInfo& n : skip.nodes)
    if (n.name == "h.1.res_2") n.inputs[0] = skip.FindTensor("emb");
  auto three = PartitionStages(skip, 2, "uniform");
  REQUIRE(three.ok());
  (*three)[0].node_end = (*three)[0].node_begin + 2;  // the embeddings alone in stage 0
  (*three)[1].node_begin = (*three)[0].node_end;
  std::vector<PipelineStage> split = {(*three)[0], (*three)[1], (*three)[1]};
  split[1].node_end = split[1].node_begin + 5;
  split[2].node_begin = split[1].node_end;
  auto refused = StageGraphs(skip, split, {2, 8});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find(
            "tensor \"emb\" of stage 0 is read by node \"h.1.res_2\"") != std::string::npos);
}

// Sequence parallelism: the residual stream between blocks is each tp rank's token chunk (its
// shape left to inference); it crosses as [tokens / tp, width], a pipe_recv of 2 chunks.
TEST_CASE("StageGraphs: sequence parallelism's token chunks cross a boundary", "[plan][pipe]") {
  ModelSpec spec;
  spec.n_layer = 2;
  spec.n_embd = 32;
  spec.vocab_size = 40;
  spec.max_seq_len = 16;
  const Graph g = Build(spec);
  auto local = TensorParallelGraph(g, 2, 1, /*sequence_parallel=*/true);
  REQUIRE(local.ok());
  auto stages = PartitionStages(local->graph, 2, "uniform");
  REQUIRE(stages.ok());
  auto graphs = StageGraphs(local->graph, *stages, {2, 8});
  INFO((graphs.ok() ? "" : graphs.status().ToString()));
  REQUIRE(graphs.ok());
  REQUIRE((*graphs)[0].send.size() == 1);
  CHECK((*graphs)[0].send_count == std::vector<int64_t>{2 * 8 / 2 * 32});
  const NodeInfo& recv = (*graphs)[1].graph.nodes.front();
  CHECK(recv.op == "pipe_recv");
  CHECK(recv.attrs.Int("chunks", 1) == 2);
  CHECK(recv.attrs.Int("width", 0) == 32);
  // Without the token shape the chunk's size is unknown: refused naming the tensor.
  auto unknown = StageGraphs(local->graph, *stages, {0, 0});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("crosses a stage boundary") != std::string::npos);
}

}  // namespace
}  // namespace ds::parallel
