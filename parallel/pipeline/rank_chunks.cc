#include "parallel/pipeline/rank_chunks.h"

#include <map>
#include <set>
#include <string>

namespace ds::parallel {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

RankChunks MapRankChunks(const std::vector<const Graph*>& chunks) {
  RankChunks rc;
  if (chunks.size() == 1) {
    rc.graph = *chunks[0];
    rc.node_offset = {0};
    rc.tensor.emplace_back(rc.graph.tensors.size());
    for (size_t t = 0; t < rc.graph.tensors.size(); ++t) rc.tensor[0][t] = static_cast<int>(t);
    return rc;
  }
  Graph& out = rc.graph;
  out = *chunks[0];
  out.tensors.clear();
  out.nodes.clear();
  std::map<std::string, int> by_name;
  std::set<std::string> node_names;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Graph& g = *chunks[c];
    std::vector<int>& local = rc.tensor.emplace_back(g.tensors.size());
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      TensorInfo info = g.tensors[t];
      auto it = by_name.find(info.name);
      if (it != by_name.end() && info.role != TensorRole::kActivation) {
        local[t] = it->second;  // the shared inputs (a parameter lives in one chunk)
        continue;
      }
      if (it != by_name.end()) info.name = "chunk" + Str(c) + "." + info.name;
      local[t] = static_cast<int>(out.tensors.size());
      by_name[info.name] = local[t];
      out.tensors.push_back(std::move(info));
    }
    rc.node_offset.push_back(static_cast<int>(out.nodes.size()));
    for (NodeInfo n : g.nodes) {
      if (!node_names.insert(n.name).second) n.name = "chunk" + Str(c) + "." + n.name;
      for (int& t : n.inputs) t = local[t];
      for (int& t : n.outputs) t = local[t];
      out.nodes.push_back(std::move(n));
    }
    out.loss = local[g.loss];
  }
  return rc;
}

StatusOr<TpLocalGraph> RankChunksTpLocal(const std::vector<TpLocalGraph>& chunks,
                                         const RankChunks& rc) {
  TpLocalGraph out;
  out.graph = rc.graph;
  out.kv_share = chunks.front().kv_share;
  out.aux_per_rank = chunks.front().aux_per_rank;
  out.replicated.assign(rc.graph.tensors.size(), false);
  std::map<int, const TpParamShard*> box;  // rc.graph parameter -> its box
  std::vector<TpCollective> backward;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const TpLocalGraph& part = chunks[c];
    const std::vector<int>& to = rc.tensor[c];
    const std::vector<int> params = part.graph.Params();
    for (size_t i = 0; i < params.size(); ++i) box[to[params[i]]] = &part.shards[i];
    for (size_t t = 0; t < part.replicated.size(); ++t)
      if (part.replicated[t]) out.replicated[to[t]] = true;
    for (TpCollective m : part.collectives) {
      m.boundary += rc.node_offset[c];
      if (m.wait >= 0) m.wait += rc.node_offset[c];
      m.tensor = m.tensor < 0 ? -1 : to[m.tensor];
      m.out = m.out < 0 ? -1 : to[m.out];
      m.capacity = m.capacity < 0 ? -1 : to[m.capacity];
      (m.backward ? backward : out.collectives).push_back(m);
    }
    for (int t : part.sp_params) out.sp_params.push_back(to[t]);
  }
  out.collectives.insert(out.collectives.end(), backward.begin(), backward.end());
  for (int t : rc.graph.Params()) {
    auto it = box.find(t);
    if (it == box.end())
      return InternalError("pipeline: parameter \"" + rc.graph.tensors[t].name +
                           "\" of a rank's chunks has no tensor-parallel box");
    out.shards.push_back(*it->second);
  }
  return out;
}

}  // namespace ds::parallel
