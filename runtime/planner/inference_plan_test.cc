// The inference plan: a tp rank's decode graph holds its heads and vocabulary rows, its KV caches
// only its kv heads (grouped-query attention, shared kv heads above n_kv_head ranks), and its
// stream is forward ranges with one all-reduce after the vocab-parallel embedding and after
// each row-parallel linear (attention's and the MLP's output projections), then the logits'
// all-gather; at tp 1, one forward.
#include "runtime/planner/inference_plan.h"

#include <catch2/catch.hpp>

#include "runtime/planner/plan_test_util.h"

namespace ds::planner {
namespace {

using Ins = proto::Instruction;
using testing::SizedGraph;

int Count(const InferencePlan& p, Ins::Kind kind) {
  int n = 0;
  for (const Ins& in : p.stream) n += in.kind() == kind;
  return n;
}

TEST_CASE("Inference plan: tp ranks' heads, caches and stream", "[plan][generate]") {
  struct Case {
    const char* family;
    int tp;
    int64_t kv_per_rank;  // the caches' kv heads on a rank
  };
  const Case cases[] = {{"gpt2", 1, 4},
                        {"gpt2", 2, 2},
                        {"gpt2", 4, 1},
                        {"llama", 2, 1},
                        {"llama", 4, 1}};  // llama: 2 kv heads
  for (const Case& c : cases) {
    INFO(c.family << " tp " << c.tp);
    const Graph model = SizedGraph(c.family, 3, 64, 96, 32);
    for (int rank = 0; rank < c.tp; ++rank) {
      auto p = MakeInferencePlan(model, 32, c.tp, rank);
      REQUIRE(p.ok());
      REQUIRE(p->decode.layers.size() == 3);
      for (const CacheLayer& l : p->decode.layers) {
        CHECK(l.n_kv_head == c.kv_per_rank);
        CHECK(l.head_dim == 16);
      }
      CHECK(p->decode.cache_bytes_per_sequence() == 3 * 2 * c.kv_per_rank * 32 * 16 * 4);
      CHECK(p->decode.vocab == 96);
      CHECK(p->vocab_local == 96 / c.tp);
      REQUIRE(p->stream.front().kind() == Ins::FORWARD);
      CHECK(p->stream.front().node_begin() == 0);
      if (c.tp == 1) {
        CHECK(p->stream.size() == 1);
        continue;
      }
      // The embedding's all-reduce, then attention's and the MLP's per layer, then the gather.
      CHECK(Count(*p, Ins::ACT_ALL_REDUCE) == 1 + 2 * 3);
      CHECK(Count(*p, Ins::ACT_ALL_GATHER) == 1);
      CHECK(Count(*p, Ins::FORWARD) == 1 + 2 * 3 + 1);
      CHECK(p->stream.back().kind() == Ins::ACT_ALL_GATHER);
      CHECK(p->stream.back().activation().tensor() == p->decode.logits);
      CHECK(p->reduced_per_token == (1 + 2 * 3) * 64);
      CHECK(p->gathered_per_token == 96 / c.tp);
      int at = 0;  // the forward ranges tile the graph in order
      for (const Ins& in : p->stream) {
        if (in.kind() != Ins::FORWARD) {
          CHECK(in.collective().group() == "tp");
          continue;
        }
        CHECK(in.node_begin() == at);
        at = in.node_end();
      }
      CHECK(at == static_cast<int>(p->decode.graph.nodes.size()));
      // The rank's vocabulary rows: the head's box starts at rank x vocab / tp.
      const std::vector<int> params = p->decode.graph.Params();
      for (size_t i = 0; i < params.size(); ++i)
        if (p->decode.graph.tensors[params[i]].sharding == ShardKind::kVocab)
          CHECK(p->shards[i].boxes.front().offset[0] == rank * 96 / c.tp);
    }
  }
}

TEST_CASE("Inference plan: heads tp cannot split are refused by name", "[plan][generate]") {
  const Graph model = SizedGraph("gpt2", 2, 48, 96, 32);  // 4 heads
  auto p = MakeInferencePlan(model, 32, 3, 0);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.status().message(), Catch::Contains("parallel.tensor 3"));
  CHECK_FALSE(MakeInferencePlan(model, 32, 2, 2).ok());
  CHECK_FALSE(MakeInferencePlan(model, 64, 1, 0).ok());  // beyond the 32 positions
}

}  // namespace
}  // namespace ds::planner
