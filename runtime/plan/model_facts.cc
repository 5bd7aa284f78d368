#include "runtime/plan/model_facts.h"

#include <algorithm>
#include <map>

#include "kernels/registry.h"
#include "runtime/base/status_macros.h"
#include "runtime/graph/activation_grads.h"
#include "runtime/graph/host_bf16.h"
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

// The activations' specs as the executor stores them: fp32; a bf16 host step's bf16 ones (the
// ops' HostBf16 declarations); a 16-bit device step's, inferred again from 16-bit parameters.
struct Storage {
  std::vector<TensorSpec> f32;           // inferred in fp32 (saved buffers come from it)
  std::vector<TensorSpec> specs;         // as stored
  std::vector<kernels::HostBf16> flags;  // a bf16 host step's ops' declarations, else empty
  bool device16 = false;
};

StatusOr<Storage> StorageOf(const Graph& graph, std::vector<TensorSpec> f32,
                            const ActivationOptions& o) {
  Storage st;
  st.f32 = std::move(f32);
  st.specs = st.f32;
  if (o.storage == ActivationStorage::kHostBf16) {
    st.flags = OpHostBf16(graph);
    std::vector<bool> fp32(st.specs.size());
    for (size_t t = 0; t < st.specs.size(); ++t) fp32[t] = st.specs[t].dtype == DType::kF32;
    const std::vector<bool> bf16 = Bf16Activations(graph, st.flags, fp32);
    for (size_t t = 0; t < st.specs.size(); ++t)
      if (bf16[t]) st.specs[t].dtype = DType::kBF16;
  } else if (o.storage == ActivationStorage::kDevice16) {
    st.device16 = true;
    for (size_t t = 0; t < graph.tensors.size(); ++t)
      if (graph.tensors[t].role == TensorRole::kParam) st.specs[t].dtype = o.model_dtype;
    for (const NodeInfo& n : graph.nodes) {
      const kernels::OpDef* def = kernels::FindOp(n.op);
      if (!def || !def->infer) continue;  // CountActivations names it
      std::vector<TensorSpec> in, out;
      for (int t : n.inputs) in.push_back(st.specs[t]);
      DS_RETURN_IF_ERROR(def->infer(n.attrs, in, &out)
                             .WithPrefix("node " + n.name + " in " + DTypeName(o.model_dtype)));
      for (size_t k = 0; k < n.outputs.size() && k < out.size(); ++k)
        st.specs[n.outputs[k]] = out[k];
    }
  }
  return st;
}

// A node's op-private saved buffers (from the fp32 specs, as the executor sizes them).
std::vector<TensorSpec> SavedOf(const NodeInfo& node, const std::vector<TensorSpec>& f32) {
  const kernels::OpDef* def = kernels::FindOp(node.op);
  if (!def || !def->saved) return {};
  std::vector<TensorSpec> in;
  for (int i : node.inputs) in.push_back(f32[i]);
  return def->saved(node.attrs, in);
}

// The recompute segments' shared arena: the largest segment's transient tensors and saved
// buffers.
void CountRecomputeArenaBytes(const Graph& graph, const Storage& st,
                              const std::vector<RecomputeSegment>& recompute, ModelFacts* facts) {
  for (const RecomputeSegment& s : recompute) {
    int64_t bytes = 0;
    for (int t : s.transient) bytes += ArenaBytes(st.specs[t].nbytes());
    for (int n = s.node_begin; n < s.node_end; ++n)
      for (const TensorSpec& sp : SavedOf(graph.nodes[n], st.f32)) bytes += ArenaBytes(sp.nbytes());
    facts->recompute_arena_bytes = std::max(facts->recompute_arena_bytes, bytes);
  }
}

// What backward keeps: each activation neither recomputed nor forward-only (KeptTensors': read by
// some backward or again by a recompute segment; and those nothing reads), counted once and
// charged to the block that produces it (it dies with that block's backward, the last backward
// that can read it), plus every node's op-private saved buffers, plus the slice of each
// checkpoint partition_activations splits. Each in its stored dtype, aligned as the executor's
// arena.
Status CountActivations(const Graph& graph, const Storage& st,
                        const std::vector<RecomputeSegment>& recompute, ModelFacts* facts) {
  const std::vector<TensorSpec>& specs = st.specs;
  CountRecomputeArenaBytes(graph, st, recompute, facts);
  std::vector<int> producer_block(graph.tensors.size(), -2);  // -2: not produced by a node
  for (const NodeInfo& n : graph.nodes)
    for (int t : n.outputs) producer_block[t] = n.block;
  std::vector<int64_t> bytes(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) bytes[t] = ArenaBytes(specs[t].nbytes());
  const ForwardOnlyPlacement forward_only = PlaceForwardOnly(graph, recompute, bytes);
  facts->forward_arena_bytes = forward_only.bytes;
  std::vector<bool> transient(specs.size(), false);
  for (const RecomputeSegment& s : recompute)
    for (int t : s.transient) transient[t] = true;
  for (int ni = 0; ni < static_cast<int>(graph.nodes.size()); ++ni) {
    const NodeInfo& n = graph.nodes[ni];
    if (kernels::FindOp(n.op) == nullptr)
      return InvalidArgumentError("op " + n.op + " of node " + n.name +
                                  " is not registered (link //kernels/ops:op_defs)");
    if (InSegment(recompute, ni)) continue;
    BlockFacts& b = facts->blocks[facts->BlockPosition(n.block)];
    for (const TensorSpec& sp : SavedOf(n, st.f32)) b.activation_bytes += ArenaBytes(sp.nbytes());
  }
  // Every other activation stays for the whole step (KeptTensors' and the ones nothing reads,
  // the loss among them), as the executor's arena keeps them.
  for (size_t t = 0; t < specs.size(); ++t) {
    if (graph.tensors[t].role != TensorRole::kActivation || transient[t] ||
        forward_only.offset[t] >= 0 || producer_block[t] == -2)
      continue;
    facts->blocks[facts->BlockPosition(producer_block[t])].activation_bytes += bytes[t];
  }
  // partition_activations: a partitioned checkpoint keeps its rank's slice (the executor's);
  // cpu_checkpointing: in host memory, nothing on the device.
  for (const RecomputeSegment& s : recompute)
    for (int t : s.on_host ? std::vector<int>() : s.partitioned)
      facts->blocks[facts->BlockPosition(producer_block[t])].activation_bytes +=
          ArenaBytes(specs[t].numel() / s.parts * static_cast<int64_t>(DTypeSize(specs[t].dtype)));
  return OkStatus();
}

// The activation gradients' arena, placed as the executor places it (activation_grads.h), in
// the dtypes a bf16 host step stores them in (host_bf16.h).
void CountActivationGrads(const Graph& graph, const Storage& st, const ActivationOptions& o,
                          ModelFacts* facts) {
  const int nt = static_cast<int>(graph.tensors.size());
  std::vector<TensorSpec> grads = st.device16 ? st.specs : st.f32;
  if (!st.flags.empty() && !o.split_backward) {
    std::vector<bool> fp32(nt);
    for (int t = 0; t < nt; ++t) fp32[t] = grads[t].dtype == DType::kF32;
    const std::vector<bool> bf16 = Bf16Gradients(graph, st.flags, fp32);
    for (int t = 0; t < nt; ++t)
      if (bf16[t]) grads[t].dtype = DType::kBF16;
  }
  std::vector<uint32_t> non_diff;
  for (const NodeInfo& n : graph.nodes)
    non_diff.push_back(kernels::FindOp(n.op)->non_differentiable_inputs);
  std::vector<int64_t> bytes(nt);
  for (int t = 0; t < nt; ++t) bytes[t] = ArenaBytes(grads[t].nbytes());
  facts->activation_grad_bytes =
      PlaceActivationGrads(graph, non_diff, o.split_backward, bytes).bytes;
}

}  // namespace

int ModelFacts::BlockPosition(int block) const {
  for (int i = 0; i < static_cast<int>(blocks.size()); ++i)
    if (blocks[i].block == block) return i;
  return -1;
}

StatusOr<ModelFacts> AnalyzeModel(const Graph& graph, int64_t micro_batch, int64_t seq_len,
                                  const std::vector<RecomputeSegment>& recompute,
                                  const ActivationOptions& options) {
  ModelFacts facts;
  facts.name = graph.name;
  DS_RETURN_IF_ERROR(LayoutParams(graph, &facts));
  DS_RETURN_IF_ERROR(GroupBlocks(graph, &facts));
  auto specs = InferTensorSpecs(graph, {{"batch", micro_batch}, {"seq", seq_len}}, graph.name);
  if (!specs.ok())
    return specs.status().WithPrefix("micro batch " + std::to_string(micro_batch) + ", seq_len " +
                                     std::to_string(seq_len));
  DS_ASSIGN_OR_RETURN(Storage st, StorageOf(graph, std::move(*specs), options));
  DS_RETURN_IF_ERROR(CountActivations(graph, st, recompute, &facts));
  // The executor's int32 token ids and targets, allocated whole on every pipeline stage.
  facts.input_bytes = 2 * micro_batch * seq_len * static_cast<int64_t>(sizeof(int32_t));
  CountActivationGrads(graph, st, options, &facts);
  return facts;
}

}  // namespace ds::plan
