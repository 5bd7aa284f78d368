#include "runtime/plan/model_facts.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/registry.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/validate.h"

namespace ds::plan {
namespace {

// Fills params with offsets, sizes and reader blocks.
Status LayoutParams(const Graph& graph, ModelFacts* facts) {
  std::map<int, int> by_tensor;
  for (int t : graph.Params()) {
    const TensorInfo& info = graph.tensors[t];
    ParamFacts p;
    p.name = info.name;
    p.tensor = t;
    p.expert = info.sharding == ShardKind::kExpert;
    p.numel = 1;
    for (const Dim& d : info.shape) {
      if (!d.symbol.empty())
        return InvalidArgumentError("parameter " + info.name + " has a symbolic shape " +
                                    SymShapeToString(info.shape));
      p.numel *= d.size;
    }
    p.offset = facts->flat_elements;
    p.span = AlignUp(p.numel, kFlatAlign);
    facts->flat_elements += p.span;
    facts->num_parameters += p.numel;
    by_tensor[t] = static_cast<int>(facts->params.size());
    facts->params.push_back(std::move(p));
  }
  facts->frozen_elements = graph.NumFrozen();
  for (const NodeInfo& n : graph.nodes)
    for (int t : n.inputs) {
      auto it = by_tensor.find(t);
      if (it == by_tensor.end()) continue;
      std::vector<int>& blocks = facts->params[it->second].blocks;
      if (std::find(blocks.begin(), blocks.end(), n.block) == blocks.end())
        blocks.push_back(n.block);
    }
  for (ParamFacts& p : facts->params) {
    if (p.blocks.empty())
      return InvalidArgumentError("parameter " + p.name + " is read by no node");
    std::sort(p.blocks.begin(), p.blocks.end());
  }
  return OkStatus();
}

// Node ranges per block; nodes must come block by block in ascending order.
Status GroupBlocks(const Graph& graph, ModelFacts* facts) {
  for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i) {
    const NodeInfo& n = graph.nodes[i];
    if (!facts->blocks.empty() && facts->blocks.back().block == n.block) {
      facts->blocks.back().node_end = i + 1;
      continue;
    }
    if (!facts->blocks.empty() && n.block < facts->blocks.back().block)
      return InvalidArgumentError("graph nodes are not grouped by block: node " + n.name +
                                  " (block " + std::to_string(n.block) + ") comes after block " +
                                  std::to_string(facts->blocks.back().block));
    BlockFacts b;
    b.block = n.block;
    b.node_begin = i;
    b.node_end = i + 1;
    facts->blocks.push_back(b);
  }
  for (int p = 0; p < static_cast<int>(facts->params.size()); ++p)
    for (int block : facts->params[p].blocks) {
      BlockFacts& b = facts->blocks[facts->BlockPosition(block)];
      b.params.push_back(p);
      b.param_elements += facts->params[p].numel;
    }
  return OkStatus();
}

// What backward keeps: each tensor KeptTensors names (read by some backward and not recomputed,
// or read again by a recompute segment; a parameter excepted), counted once and charged to the
// block that produces it (it dies with that block's backward, the last
// backward that can read it), plus every node's op-private saved buffers, plus the slice of each
// checkpoint partition_activations splits.
Status CountActivations(const Graph& graph, const std::vector<TensorSpec>& specs,
                        const std::vector<RecomputeSegment>& recompute, ModelFacts* facts) {
  for (const RecomputeSegment& s : recompute) {
    int64_t bytes = 0;
    for (int t : s.transient) bytes += specs[t].nbytes();
    for (int n = s.node_begin; n < s.node_end; ++n) {
      const NodeInfo& node = graph.nodes[n];
      const kernels::OpDef* def = kernels::FindOp(node.op);
      if (!def || !def->saved) continue;
      std::vector<TensorSpec> in;
      for (int i : node.inputs) in.push_back(specs[i]);
      for (const TensorSpec& sp : def->saved(node.attrs, in)) bytes += sp.nbytes();
    }
    facts->recompute_arena_bytes = std::max(facts->recompute_arena_bytes, bytes);
  }
  std::vector<int> producer_block(graph.tensors.size(),
                                  -2);  // -2: not produced by a node
  for (const NodeInfo& n : graph.nodes)
    for (int t : n.outputs) producer_block[t] = n.block;
  std::vector<int64_t> bytes(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) bytes[t] = specs[t].nbytes();
  facts->forward_arena_bytes = PlaceForwardOnly(graph, recompute, bytes).bytes;
  const std::vector<bool> keep = KeptTensors(graph, recompute);
  std::set<int> kept;
  for (size_t t = 0; t < keep.size(); ++t)
    if (keep[t]) kept.insert(static_cast<int>(t));
  for (int ni = 0; ni < static_cast<int>(graph.nodes.size()); ++ni) {
    const NodeInfo& n = graph.nodes[ni];
    const kernels::OpDef* def = kernels::FindOp(n.op);
    if (def == nullptr)
      return InvalidArgumentError("op " + n.op + " of node " + n.name +
                                  " is not registered (link //kernels/ops:op_defs)");
    std::vector<TensorSpec> in;
    for (int t : n.inputs) in.push_back(specs[t]);
    if (!def->saved || InSegment(recompute, ni)) continue;
    BlockFacts& b = facts->blocks[facts->BlockPosition(n.block)];
    for (const TensorSpec& s : def->saved(n.attrs, in)) b.activation_bytes += s.nbytes();
  }
  for (int t : kept) {
    if (graph.tensors[t].role == TensorRole::kParam || producer_block[t] == -2) continue;
    facts->blocks[facts->BlockPosition(producer_block[t])].activation_bytes += specs[t].nbytes();
  }
  // partition_activations: a partitioned checkpoint keeps its rank's slice (the executor's);
  // cpu_checkpointing: in host memory, nothing on the device.
  for (const RecomputeSegment& s : recompute)
    for (int t : s.on_host ? std::vector<int>() : s.partitioned)
      facts->blocks[facts->BlockPosition(producer_block[t])].activation_bytes +=
          specs[t].nbytes() / s.parts;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    TensorRole role = graph.tensors[t].role;
    if (role == TensorRole::kInput || role == TensorRole::kTarget)
      facts->input_bytes += specs[t].nbytes();
  }
  return OkStatus();
}

}  // namespace

int ModelFacts::BlockPosition(int block) const {
  for (int i = 0; i < static_cast<int>(blocks.size()); ++i)
    if (blocks[i].block == block) return i;
  return -1;
}

StatusOr<ModelFacts> AnalyzeModel(const Graph& graph, int64_t micro_batch, int64_t seq_len,
                                  const std::vector<RecomputeSegment>& recompute) {
  ModelFacts facts;
  facts.name = graph.name;
  DS_RETURN_IF_ERROR(LayoutParams(graph, &facts));
  DS_RETURN_IF_ERROR(GroupBlocks(graph, &facts));
  auto specs = InferTensorSpecs(graph, {{"batch", micro_batch}, {"seq", seq_len}}, graph.name);
  if (!specs.ok())
    return specs.status().WithPrefix("micro batch " + std::to_string(micro_batch) + ", seq_len " +
                                     std::to_string(seq_len));
  DS_RETURN_IF_ERROR(CountActivations(graph, *specs, recompute, &facts));
  return facts;
}

}  // namespace ds::plan
