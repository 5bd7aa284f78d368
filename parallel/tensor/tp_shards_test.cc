// Tensor-parallel shards by Megatron's rules: for GPT-2 and a grouped-query Llama at tp 2 and 4
// the ranks' boxes tile every split parameter exactly once, the fused QKV is split by heads
// (key/value heads replicated when tp exceeds them), and sizes a rule cannot split are refused
// naming the model key.
#include "parallel/tensor/tp_shards.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "runtime/graph/model_builder.h"

namespace ds::parallel {
namespace {

Graph Build(const std::string& family, int64_t heads, int64_t kv, int64_t vocab = 256) {
  ModelSpec spec = ModelPreset(family == "llama" ? "llama-tiny" : "gpt2-tiny").value();
  spec.n_embd = 64;
  spec.n_head = heads;
  spec.n_kv_head = kv;
  spec.vocab_size = vocab;
  return BuildModelGraph(spec).value();
}

// Each element of every parameter, counted over the ranks' boxes.
void CheckTiling(const Graph& g, int tp) {
  std::map<std::string, std::vector<int>> hits;
  std::map<std::string, bool> replicated;
  for (int r = 0; r < tp; ++r) {
    auto shards = TensorParallelShards(g, tp, r);
    INFO(shards.status().ToString());
    REQUIRE(shards.ok());
    for (const TpParamShard& s : *shards) {
      int64_t numel = 1;
      for (int64_t d : s.full_shape) numel *= d;
      std::vector<int>& h = hits[s.name];
      h.resize(numel);
      replicated[s.name] = s.replicated;
      int64_t local = 1;
      for (int64_t d : s.local_shape) local *= d;
      int64_t boxes = 0;
      for (const TpBox& b : s.boxes) {
        boxes += b.numel();
        const int64_t cols = s.full_shape.size() == 2 ? s.full_shape[1] : 1;
        for (int64_t i = 0; i < b.shape[0]; ++i)
          for (int64_t j = 0; j < (s.full_shape.size() == 2 ? b.shape[1] : 1); ++j)
            ++h[(b.offset[0] + i) * cols + (s.full_shape.size() == 2 ? b.offset[1] + j : 0)];
      }
      CHECK(boxes == local);
      // ShardRanges covers exactly what TakeShard reads: the full tensor NaN outside them.
      std::vector<float> full(numel, std::nanf("")), part(local);
      int64_t covered = 0;
      for (const auto& [lo, hi] : ShardRanges(s)) {
        for (int64_t i = lo; i < hi; ++i) full[i] = static_cast<float>(i);
        covered += hi - lo;
      }
      TakeShard(s, full.data(), part.data());
      int64_t nan = 0;
      for (float v : part) nan += std::isnan(v);
      CHECK(nan == 0);
      CHECK(covered == local);
    }
  }
  for (const auto& [name, h] : hits) {
    INFO(name);
    const int want = replicated[name] ? tp : 1;
    for (int c : h) REQUIRE(c == want);
  }
}

TEST_CASE("TP shards: GPT-2 and grouped-query Llama tile every parameter", "[plan][tp]") {
  for (int tp : {1, 2, 4}) {
    INFO("tp " << tp);
    CheckTiling(Build("gpt2", 4, 4), tp);
    CheckTiling(Build("llama", 8, 4), tp);
  }
}

TEST_CASE("TP shards: the fused QKV is split by heads", "[plan][tp]") {
  // Llama, 8 query heads, 2 kv heads, head_dim 8: rows [64 q | 16 k | 16 v].
  const Graph g = Build("llama", 8, 2);
  auto find = [](const std::vector<TpParamShard>& v, const std::string& name) {
    for (const TpParamShard& s : v)
      if (s.name == name) return s;
    FAIL("no " << name);
    return TpParamShard();
  };
  // tp 2: each rank 4 query heads and its own kv head.
  auto r1 = TensorParallelShards(g, 2, 1);
  REQUIRE(r1.ok());
  TpParamShard qkv = find(*r1, "layers.0.attn.qkv.weight");
  REQUIRE(qkv.boxes.size() == 3);
  CHECK(qkv.boxes[0].offset[0] == 32);  // query heads 4-7
  CHECK(qkv.boxes[0].shape[0] == 32);
  CHECK(qkv.boxes[1].offset[0] == 64 + 8);       // key head 1
  CHECK(qkv.boxes[2].offset[0] == 64 + 16 + 8);  // value head 1
  CHECK(qkv.local_shape == std::vector<int64_t>{48, 64});
  // tp 4 > 2 kv heads: ranks 0-1 share kv head 0, ranks 2-3 kv head 1 (replicated).
  auto r3 = TensorParallelShards(g, 4, 3);
  REQUIRE(r3.ok());
  qkv = find(*r3, "layers.0.attn.qkv.weight");
  CHECK(qkv.boxes[0].offset[0] == 48);      // query heads 6-7
  CHECK(qkv.boxes[1].offset[0] == 64 + 8);  // key head 1
  CHECK(qkv.boxes[1].shape[0] == 8);
  // Row-parallel output projection: columns.
  TpParamShard o = find(*r3, "layers.0.attn.o_proj.weight");
  CHECK(o.boxes[0].offset == std::vector<int64_t>{0, 48});
  CHECK(o.local_shape == std::vector<int64_t>{64, 16});
}

TEST_CASE("TP shards: sizes the rules cannot split are refused naming the key", "[plan][tp]") {
  auto heads = TensorParallelShards(Build("gpt2", 4, 4, 384), 3, 0);
  REQUIRE_FALSE(heads.ok());
  CHECK_THAT(heads.status().message(),
             Catch::Contains("parallel.tensor 3 does not divide model.n_head 4"));
  auto kv = TensorParallelShards(Build("llama", 8, 8), 8, 0);
  CHECK(kv.ok());  // 8 kv heads over 8 ranks
  auto vocab = TensorParallelShards(Build("gpt2", 4, 4, 250), 4, 0);
  REQUIRE_FALSE(vocab.ok());
  CHECK_THAT(vocab.status().message(), Catch::Contains("model.vocab_size 250"));
  CHECK_THAT(vocab.status().message(), Catch::Contains("multiple of 128 x tp: 512"));
}

}  // namespace
}  // namespace ds::parallel
