#include "parallel/tensor/tp_shards.h"

#include <algorithm>
#include <map>

namespace ds::parallel {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

Status Bad(const std::string& what) { return InvalidArgumentError("tensor parallelism: " + what); }

// Attention feeding on a linear's output (directly or through rope and head_rmsnorm): that
// linear is the fused QKV, whose rows are [query heads; key heads; value heads] x head_dim.
struct Heads {
  int64_t q = 0, kv = 0;
};

std::map<int, Heads> QkvLinears(const Graph& g) {
  std::map<int, int> producer;  // tensor -> node
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int t : g.nodes[n].outputs) producer[t] = static_cast<int>(n);
  std::map<int, Heads> out;  // linear node -> heads
  for (const NodeInfo& n : g.nodes) {
    if ((n.op != "attention" && n.op != "kv_attention") || n.inputs.empty()) continue;
    auto it = producer.find(n.inputs[0]);
    // Through the per-head ops between them: rope, Qwen 3's q / k norms.
    while (it != producer.end() &&
           (g.nodes[it->second].op == "rope" || g.nodes[it->second].op == "head_rmsnorm"))
      it = producer.find(g.nodes[it->second].inputs[0]);
    if (it == producer.end() || g.nodes[it->second].op != "linear") continue;
    const int64_t h = n.attrs.Int("n_head", 0);
    out[it->second] = {h, n.attrs.Int("n_kv_head", h)};
  }
  return out;
}

// Rows [lo, lo + n) x every other dimension.
TpBox Rows(const std::vector<int64_t>& full, int64_t lo, int64_t n) {
  TpBox b{std::vector<int64_t>(full.size(), 0), full};
  b.offset[0] = lo;
  b.shape[0] = n;
  return b;
}

// Rank r's rows of a fused QKV weight or bias (dim 0 = (q + 2 kv) x head_dim).
StatusOr<std::vector<TpBox>> QkvBoxes(const std::string& name, const std::vector<int64_t>& full,
                                      Heads heads, int tp, int r) {
  if (heads.q <= 0 || full[0] % (heads.q + 2 * heads.kv) != 0)
    return Bad(name + ": " + Str(full[0]) + " rows are not (n_head + 2 n_kv_head) heads");
  if (heads.q % tp != 0)
    return Bad("parallel.tensor " + Str(tp) + " does not divide model.n_head " + Str(heads.q) +
               " (" + name + " is split by attention heads)");
  if (heads.kv % tp != 0 && tp % heads.kv != 0)
    return Bad("parallel.tensor " + Str(tp) + " and model.n_kv_head " + Str(heads.kv) +
               ": one must divide the other (" + name +
               "'s key/value heads are split, or replicated when tp exceeds them)");
  const int64_t d = full[0] / (heads.q + 2 * heads.kv), q = heads.q / tp;
  // Key/value heads this rank's query heads read: its share, or the one group they belong to.
  const int64_t kv = heads.kv >= tp ? heads.kv / tp : 1;
  const int64_t kv_first = heads.kv >= tp ? r * kv : (r * q) / (heads.q / heads.kv);
  std::vector<TpBox> boxes = {Rows(full, r * q * d, q * d),
                              Rows(full, (heads.q + kv_first) * d, kv * d),
                              Rows(full, (heads.q + heads.kv + kv_first) * d, kv * d)};
  if (heads.kv < tp)
    for (int i = 1; i < 3; ++i) {
      boxes[i].share = tp / static_cast<int>(heads.kv);
      boxes[i].replica = r % boxes[i].share != 0;
    }
  return boxes;
}

// The one box of an even split of dimension `dim`, or the error naming what does not divide.
StatusOr<TpBox> EvenSplit(const std::string& name, const std::vector<int64_t>& full, int dim,
                          const std::string& what, int tp, int r) {
  if (full[dim] % tp != 0) return Bad("parallel.tensor " + Str(tp) + " does not divide " + what);
  TpBox b{std::vector<int64_t>(full.size(), 0), full};
  b.shape[dim] = full[dim] / tp;
  b.offset[dim] = r * b.shape[dim];
  return b;
}

}  // namespace

int64_t TpBox::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<std::vector<TpParamShard>> TensorParallelShards(const Graph& g, int tp, int rank) {
  if (tp < 1 || rank < 0 || rank >= tp)
    return Bad("rank " + Str(rank) + " of parallel.tensor " + Str(tp));
  const std::map<int, Heads> qkv = QkvLinears(g);
  std::map<int, int> qkv_param;  // parameter tensor -> linear node
  for (const auto& [node, heads] : qkv)
    for (size_t i = 1; i < g.nodes[node].inputs.size(); ++i)
      qkv_param[g.nodes[node].inputs[i]] = node;
  std::vector<TpParamShard> out;
  for (int t : g.Params()) {
    const TensorInfo& info = g.tensors[t];
    TpParamShard s;
    s.name = info.name;
    for (const Dim& d : info.shape) s.full_shape.push_back(d.size);
    const std::vector<int64_t>& full = s.full_shape;
    auto split = [&](int dim, const std::string& what) -> Status {
      auto box = EvenSplit(s.name, full, dim, what, tp, rank);
      if (!box.ok()) return box.status();
      s.boxes = {*box};
      return OkStatus();
    };
    const ShardKind kind = tp == 1 ? ShardKind::kReplicated : info.sharding;
    if (kind == ShardKind::kColumn && qkv_param.count(t)) {
      auto boxes = QkvBoxes(s.name, full, qkv.at(qkv_param.at(t)), tp, rank);
      if (!boxes.ok()) return boxes.status();
      s.boxes = *boxes;
    } else if (kind == ShardKind::kColumn) {
      Status st = split(0, s.name + "'s " + Str(full[0]) +
                               " output features (model.ffn_hidden "
                               "or n_embd)");
      if (!st.ok()) return st;
    } else if (kind == ShardKind::kRow && full.size() == 2) {
      Status st = split(1, s.name + "'s " + Str(full[1]) + " input features");
      if (!st.ok()) return st;
    } else if (kind == ShardKind::kVocab) {
      const int64_t padded = (full[0] + 128 * tp - 1) / (128 * tp) * (128 * tp);
      Status st = split(0, "model.vocab_size " + Str(full[0]) + " (" + s.name +
                               " is split by vocabulary rows; Megatron pads it to a multiple "
                               "of 128 x tp: " +
                               Str(padded) + ")");
      if (!st.ok()) return st;
    } else {
      s.replicated = true;
      s.boxes = {TpBox{std::vector<int64_t>(full.size(), 0), full}};
    }
    s.local_shape = s.boxes.front().shape;
    const size_t dim = kind == ShardKind::kRow ? 1 : 0;
    for (size_t i = 1; i < s.boxes.size(); ++i) s.local_shape[dim] += s.boxes[i].shape[dim];
    out.push_back(std::move(s));
  }
  return out;
}

void TakeShard(const TpParamShard& s, const float* full, float* local) {
  // Boxes stack along dimension 0 unless they span all of it (row-parallel: dimension 1).
  bool along0 = false;
  for (const TpBox& b : s.boxes) along0 = along0 || b.shape[0] != s.full_shape[0];
  int64_t inner = 1;  // elements per index of dimension 0 in the full tensor
  for (size_t d = 1; d < s.full_shape.size(); ++d) inner *= s.full_shape[d];
  if (along0 || s.full_shape.size() < 2) {
    for (const TpBox& b : s.boxes) {
      const float* from = full + b.offset[0] * inner;
      local = std::copy(from, from + b.shape[0] * inner, local);
    }
    return;
  }
  const int64_t local_cols = s.local_shape[1], rest = inner / s.full_shape[1];
  int64_t col = 0;
  for (const TpBox& b : s.boxes) {
    for (int64_t r = 0; r < s.full_shape[0]; ++r) {
      const float* from = full + r * inner + b.offset[1] * rest;
      std::copy(from, from + b.shape[1] * rest, local + (r * local_cols + col) * rest);
    }
    col += b.shape[1];
  }
}

std::vector<std::pair<int64_t, int64_t>> ShardRanges(const TpParamShard& s) {
  bool along0 = false;
  for (const TpBox& b : s.boxes) along0 = along0 || b.shape[0] != s.full_shape[0];
  int64_t inner = 1;
  for (size_t d = 1; d < s.full_shape.size(); ++d) inner *= s.full_shape[d];
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const TpBox& b : s.boxes) {
    if (along0 || s.full_shape.size() < 2) {
      out.push_back({b.offset[0] * inner, (b.offset[0] + b.shape[0]) * inner});
      continue;
    }
    const int64_t rest = inner / s.full_shape[1];
    for (int64_t r = 0; r < s.full_shape[0]; ++r)
      out.push_back(
          {r * inner + b.offset[1] * rest, r * inner + (b.offset[1] + b.shape[1]) * rest});
  }
  std::sort(out.begin(), out.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& r : out) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  return merged;
}

std::vector<FlatPiece> LocalToFull(const TpParamShard& s, int64_t local_begin, int64_t local_end) {
  std::vector<FlatPiece> out;
  bool along0 = false;
  for (const TpBox& b : s.boxes) along0 = along0 || b.shape[0] != s.full_shape[0];
  int64_t inner = 1;
  for (size_t d = 1; d < s.full_shape.size(); ++d) inner *= s.full_shape[d];
  const TpBox* box = nullptr;
  auto add = [&](int64_t local, int64_t full, int64_t count) {
    const int64_t lo = std::max(local, local_begin), hi = std::min(local + count, local_end);
    if (lo < hi) out.push_back({lo, full + (lo - local), hi - lo, box});
  };
  if (along0 || s.full_shape.size() < 2) {  // each box: whole rows, contiguous in both
    int64_t local = 0;
    for (const TpBox& b : s.boxes) {
      box = &b;
      add(local, b.offset[0] * inner, b.shape[0] * inner);
      local += b.shape[0] * inner;
    }
    return out;
  }
  const int64_t rest = inner / s.full_shape[1], local_cols = s.local_shape[1];
  int64_t col = 0;
  for (const TpBox& b : s.boxes) {  // row-parallel: a piece of every row
    box = &b;
    for (int64_t r = 0; r < s.full_shape[0]; ++r)
      add((r * local_cols + col) * rest, r * inner + b.offset[1] * rest, b.shape[1] * rest);
    col += b.shape[1];
  }
  std::sort(out.begin(), out.end(),
            [](const FlatPiece& a, const FlatPiece& b) { return a.local < b.local; });
  return out;
}

}  // namespace ds::parallel
