// Builder: appends tensors and nodes to a Graph with short calls (the model generators'
// shared helper: model_builder.cc, moe_builder.cc). Internal to runtime/graph.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/graph.h"

namespace ds::graph_internal {

// Appends tensors and nodes to a Graph with short calls.
class Builder {
 public:
  explicit Builder(Graph* g) : g_(g) {}

  int Param(const std::string& name, Shape shape, InitSpec init, ShardKind shard) {
    TensorInfo t;
    t.name = name;
    for (int64_t d : shape) t.shape.push_back(Dim::Fixed(d));
    t.role = TensorRole::kParam;
    t.init = init;
    t.sharding = shard;
    return Add(std::move(t));
  }
  Graph* graph() const { return g_; }
  int Data(const std::string& name, TensorRole role, DType dtype = DType::kI32) {
    TensorInfo t;
    t.name = name;
    t.shape = {Dim::Sym("batch"), Dim::Sym("seq")};
    t.dtype = dtype;
    t.role = role;
    return Add(std::move(t));
  }
  // Adds node `op` producing a new activation `out` of shape [batch, seq, width]
  // (width 0: a scalar [1]; -1: left to shape inference).
  int Node(const std::string& op, const std::string& out, std::vector<int> inputs, int64_t width,
           int block, kernels::Attrs attrs = {}) {
    TensorInfo t;
    t.name = out;
    if (width > 0)
      t.shape = {Dim::Sym("batch"), Dim::Sym("seq"), Dim::Fixed(width)};
    else if (width == 0)
      t.shape = {Dim::Fixed(1)};
    t.role = TensorRole::kActivation;
    int o = Add(std::move(t));
    NodeInfo n;
    n.name = out;
    n.op = op;
    n.inputs = std::move(inputs);
    n.outputs = {o};
    n.attrs = std::move(attrs);
    n.block = block;
    g_->nodes.push_back(std::move(n));
    return o;
  }
  // Adds node `op` with several outputs: (name, dtype), shapes left to inference.
  std::vector<int> Nodes(const std::string& op, const std::string& name,
                         const std::vector<std::pair<std::string, DType>>& outs,
                         std::vector<int> inputs, int block, kernels::Attrs attrs = {}) {
    NodeInfo n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    for (const auto& [out, dtype] : outs) {
      TensorInfo t;
      t.name = out;
      t.dtype = dtype;
      t.role = TensorRole::kActivation;
      n.outputs.push_back(Add(std::move(t)));
    }
    n.attrs = std::move(attrs);
    n.block = block;
    g_->nodes.push_back(n);
    return n.outputs;
  }

 private:
  int Add(TensorInfo t) {
    g_->tensors.push_back(std::move(t));
    return static_cast<int>(g_->tensors.size()) - 1;
  }
  Graph* g_;
};

inline InitSpec Normal(float std) { return {InitSpec::kNormal, 0.0f, std, 0, 0, 0}; }
inline InitSpec Zeros() { return {InitSpec::kZeros, 0, 0, 0, 0, 0}; }
inline InitSpec Ones() { return {InitSpec::kOnes, 0, 0, 0, 0, 0}; }

}  // namespace ds::graph_internal
