// ParamStore::Fill at ZeRO-3 (param_fill.cc): each rank asks its source only for what it keeps,
// one range and at most 4M values per call, and ends with every owned master value, its
// parameter-shard copy and the persistent units' flat copy equal to what the source gave.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/core/dtype.h"
#include "runtime/graph/model_builder.h"
#include "zero/param_store.h"

namespace ds::zero {
namespace {

// gpt2-tiny with a vocabulary large enough that each rank's half of its embedding (300000 x 64)
// spans several chunks.
Graph BigEmbeddingGraph() {
  ModelSpec spec = ModelPreset("gpt2-tiny").value();
  spec.vocab_size = 300000;
  return BuildModelGraph(spec).value();
}

float Value(int slot, int64_t i) { return float((slot * 7919 + i) % 1000) * 0.01f - 5.0f; }

struct Call {
  int slot;
  int64_t lo, hi, first;
};

void CheckRank(const Graph& g, DType dtype, int rank) {
  ParamStore ps(g, dtype);
  const int64_t total = ps.total_elements();
  // The cut falls inside the embedding, which is the first parameter.
  const int64_t cut = ps.slots()[0].numel / 2 + 5;
  ShardLayout l;
  l.segments = {rank == 0 ? ShardSegment{0, cut, 0} : ShardSegment{cut, total - cut, 0}};
  l.shard_elements = rank == 0 ? cut : total - cut;
  l.partition_params = l.partition_grads = true;
  ps.Shard(l);
  // Two small parameters stay gathered (stage 3's persistent units): one on each side.
  ParamStore::Ranges persistent;
  for (const ParamSlot& s : ps.slots())
    if (s.numel < 1000 && persistent.size() < 2) persistent.push_back({s.offset, s.numel});
  std::vector<Call> calls;
  const Status st = ps.Fill(
      [&](int slot, float* dst, int64_t whole, const ParamStore::Ranges& needed, int64_t first) {
        REQUIRE(needed.size() == 1);
        const auto [lo, hi] = needed[0];
        calls.push_back({slot, lo, hi, first});
        REQUIRE(whole == ps.slots()[slot].numel);
        for (int64_t i = lo; i < hi; ++i) dst[i - first] = Value(slot, i);
        return OkStatus();
      },
      {}, nullptr, &persistent);
  REQUIRE(st.ok());
  int embedding_calls = 0;
  for (const Call& c : calls) {
    CHECK(c.first == c.lo);
    CHECK(c.hi - c.lo <= ParamStore::kFillChunk);
    if (c.slot == 0) ++embedding_calls;
  }
  const int64_t kept = rank == 0 ? cut : ps.slots()[0].numel - cut;
  CHECK(embedding_calls == (kept + ParamStore::kFillChunk - 1) / ParamStore::kFillChunk);
  CHECK(embedding_calls >= 3);
  const size_t size = DTypeSize(dtype);
  int64_t checked = 0, kept_elsewhere = 0, wrong_master = 0, wrong_shard = 0, wrong_copy = 0;
  for (size_t k = 0; k < ps.slots().size(); ++k) {
    const ParamSlot& s = ps.slots()[k];
    for (int64_t i = 0; i < s.numel; ++i) {
      const int64_t flat = s.offset + i;
      const float want = Value(static_cast<int>(k), i);
      if (rank == 0 ? flat < cut : flat >= cut) {  // owned
        ++checked;
        wrong_master += *ps.MasterAt(flat) != want;
        if (dtype == DType::kBF16)
          wrong_shard += *static_cast<uint16_t*>(ps.ModelOutAt(flat)) != FloatToBf16(want);
      }
      const bool persists = std::any_of(persistent.begin(), persistent.end(), [&](const auto& r) {
        return flat >= r.first && flat < r.first + r.second;
      });
      if (!persists) continue;
      if (!(rank == 0 ? flat < cut : flat >= cut)) ++kept_elsewhere;
      const char* copy = static_cast<const char*>(ps.model()) + flat * size;
      if (dtype == DType::kBF16)
        wrong_copy += *reinterpret_cast<const uint16_t*>(copy) != FloatToBf16(want);
      else
        wrong_copy += *reinterpret_cast<const float*>(copy) != want;
    }
  }
  int64_t read = 0;
  for (const Call& c : calls) read += c.hi - c.lo;
  CHECK(read == checked + kept_elsewhere);  // nothing read that the rank does not keep
  CHECK(wrong_master == 0);
  CHECK(wrong_shard == 0);
  CHECK(wrong_copy == 0);
}

TEST_CASE("Fill at stage 3: chunks of kept ranges straight into the master", "[zero]") {
  const Graph g = BigEmbeddingGraph();
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int rank : {0, 1}) {
      INFO(DTypeName(dtype) << " rank " << rank);
      CheckRank(g, dtype, rank);
    }
}

}  // namespace
}  // namespace ds::zero
