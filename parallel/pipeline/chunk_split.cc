#include "parallel/pipeline/chunk_split.h"

#include <algorithm>
#include <map>
#include <string>

namespace ds::parallel {
namespace {

using Ins = proto::Instruction;

std::string Str(int64_t v) { return std::to_string(v); }

bool IsCompute(const Ins& in) {
  return in.kind() == Ins::FORWARD || in.kind() == Ins::RECOMPUTE || in.kind() == Ins::BACKWARD;
}

bool HasActivation(const Ins& in) {
  switch (in.kind()) {
    case Ins::ACT_ALL_REDUCE:
    case Ins::ACT_ALL_GATHER:
    case Ins::ACT_REDUCE_SCATTER:
    case Ins::ACT_ALL_TO_ALL:
    case Ins::CHECKPOINT_STASH:
    case Ins::CHECKPOINT_RESTORE:
    case Ins::CHECKPOINT_RELOAD:
      return true;
    default:
      return false;
  }
}

class Splitter {
 public:
  explicit Splitter(const RankChunks& rc) : rc_(rc), out_(rc.node_offset.size()) {
    for (size_t c = 0; c < rc.tensor.size(); ++c)
      for (size_t t = 0; t < rc.tensor[c].size(); ++t)
        if (rc.graph.tensors[rc.tensor[c][t]].role == TensorRole::kActivation)
          owner_[rc.tensor[c][t]] = {static_cast<int>(c), static_cast<int>(t)};
  }

  Status Add(const Ins& in, int from) {
    if (IsCompute(in)) return AddCompute(in, from);
    if (!HasActivation(in)) {
      out_[last_].push_back({in, from});
      return OkStatus();
    }
    Ins x = in;
    proto::ActivationRef* a = x.mutable_activation();
    auto it = owner_.find(a->tensor());
    if (it == owner_.end())
      return InternalError("plan: " + Ins::Kind_Name(in.kind()) + " of \"" + a->name() +
                           "\" names no activation of the rank's chunks");
    const int c = it->second.first;
    a->set_tensor(it->second.second);
    if (in.kind() == Ins::ACT_ALL_GATHER || in.kind() == Ins::ACT_REDUCE_SCATTER ||
        in.kind() == Ins::ACT_ALL_TO_ALL) {
      auto out = owner_.find(a->out_tensor());
      if (out == owner_.end() || out->second.first != c)
        return InternalError("plan: " + Ins::Kind_Name(in.kind()) + " of \"" + a->name() +
                             "\" writes a tensor outside its chunk");
      a->set_out_tensor(out->second.second);
    }
    if (in.kind() == Ins::ACT_ALL_TO_ALL && a->capacity_tensor() >= 0) {
      auto cap = owner_.find(a->capacity_tensor());
      if (cap == owner_.end() || cap->second.first != c)
        return InternalError("plan: ACT_ALL_TO_ALL of \"" + a->name() +
                             "\" reads a capacity outside its chunk");
      a->set_capacity_tensor(cap->second.second);
    }
    out_[c].push_back({std::move(x), from});
    last_ = c;
    return OkStatus();
  }

  std::vector<std::vector<ChunkPiece>> Take() { return std::move(out_); }

 private:
  int Chunks() const { return static_cast<int>(rc_.node_offset.size()); }
  int End(int c) const {
    return c + 1 < Chunks() ? rc_.node_offset[c + 1] : static_cast<int>(rc_.graph.nodes.size());
  }

  Status AddCompute(const Ins& in, int from) {
    const int b = in.node_begin(), e = in.node_end();
    if (b < 0 || e > static_cast<int>(rc_.graph.nodes.size()) || b >= e)
      return InternalError("plan: " + Ins::Kind_Name(in.kind()) + " of nodes [" + Str(b) + ", " +
                           Str(e) + ") leaves the rank's graph");
    std::vector<int> chunks;
    for (int c = 0; c < Chunks(); ++c)
      if (rc_.node_offset[c] < e && End(c) > b) chunks.push_back(c);
    if (in.kind() == Ins::BACKWARD) std::reverse(chunks.begin(), chunks.end());
    for (size_t j = 0; j < chunks.size(); ++j) {
      const int c = chunks[j], lo = std::max(b, rc_.node_offset[c]), hi = std::min(e, End(c));
      Ins x = in;
      x.set_node_begin(lo - rc_.node_offset[c]);
      x.set_node_end(hi - rc_.node_offset[c]);
      x.set_first_block(rc_.graph.nodes[lo].block);
      x.set_last_block(rc_.graph.nodes[hi - 1].block);
      x.set_computes_loss(in.computes_loss() && hi == e);
      if (j > 0) {
        x.clear_wait_for();
        x.clear_allocs();
        x.clear_frees_before();
      }
      if (j + 1 < chunks.size()) x.clear_frees();
      out_[c].push_back({std::move(x), from});
      last_ = c;
    }
    return OkStatus();
  }

  const RankChunks& rc_;
  std::map<int, std::pair<int, int>> owner_;  // rank-graph activation -> (chunk, its tensor)
  std::vector<std::vector<ChunkPiece>> out_;
  int last_ = 0;
};

}  // namespace

StatusOr<std::vector<std::vector<ChunkPiece>>> SplitByChunk(
    const RankChunks& chunks, const google::protobuf::RepeatedPtrField<proto::Instruction>& list,
    const std::vector<int>& group) {
  if (chunks.node_offset.size() <= 1) {
    std::vector<std::vector<ChunkPiece>> one(1);
    for (int i : group) one[0].push_back({list[i], i});
    return one;
  }
  Splitter s(chunks);
  for (int i : group) {
    Status st = s.Add(list[i], i);
    if (!st.ok()) return st;
  }
  return s.Take();
}

}  // namespace ds::parallel
