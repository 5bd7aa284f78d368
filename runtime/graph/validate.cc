#include "runtime/graph/validate.h"

#include <algorithm>
#include <set>

#include "kernels/registry.h"
#include "runtime/base/status_macros.h"

namespace ds {
namespace {

std::string NodeWhere(const std::string& source, const NodeInfo& n) {
  return source + ": node \"" + n.name + "\" (" + n.op + ")";
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// Node n against its op's definition: a known op, input and output counts, attribute names.
Status CheckNodeSignature(const NodeInfo& n, const std::string& source) {
  const kernels::OpDef* def = kernels::FindOp(n.op);
  if (!def)
    return InvalidArgumentError(NodeWhere(source, n) + ": unknown op \"" + n.op +
                                "\" (known ops: " + Join(kernels::RegisteredOps()) + ")");
  int ni_in = static_cast<int>(n.inputs.size());
  if (ni_in < def->min_inputs || ni_in > def->max_inputs) {
    std::string want = def->min_inputs == def->max_inputs ? std::to_string(def->min_inputs)
                                                          : std::to_string(def->min_inputs) + "-" +
                                                                std::to_string(def->max_inputs);
    return InvalidArgumentError(NodeWhere(source, n) + ": has " + std::to_string(ni_in) +
                                " inputs, " + n.op + " takes " + want);
  }
  if (static_cast<int>(n.outputs.size()) != def->num_outputs)
    return InvalidArgumentError(NodeWhere(source, n) + ": has " + std::to_string(n.outputs.size()) +
                                " outputs, " + n.op + " produces " +
                                std::to_string(def->num_outputs));
  for (const std::string& a : n.attrs.Names())
    if (std::find(def->attr_names.begin(), def->attr_names.end(), a) == def->attr_names.end())
      return InvalidArgumentError(NodeWhere(source, n) + ": unknown attribute \"" + a +
                                  "\" (accepted: " + Join(def->attr_names) + ")");
  return OkStatus();
}

// Records node ni as the producer of its outputs, which must be activations not yet produced.
Status RecordProducer(const Graph& g, size_t ni, const std::string& source,
                      std::vector<int>* producer) {
  const NodeInfo& n = g.nodes[ni];
  for (int o : n.outputs) {
    const TensorInfo& t = g.tensors[o];
    if (t.role != TensorRole::kActivation)
      return InvalidArgumentError(NodeWhere(source, n) + ": writes " + TensorRoleName(t.role) +
                                  " tensor \"" + t.name + "\"; nodes may only produce activations");
    if ((*producer)[o] >= 0)
      return InvalidArgumentError(NodeWhere(source, n) + ": output \"" + t.name +
                                  "\" is already produced by node \"" +
                                  g.nodes[(*producer)[o]].name + "\"");
    (*producer)[o] = static_cast<int>(ni);
  }
  return OkStatus();
}

// Whether walking producers backwards from node `from` reaches node `target` (a cycle).
bool ReachesNode(const Graph& g, const std::vector<int>& producer, int from, int target) {
  std::vector<int> stack = {from};
  std::set<int> seen;
  bool cycle = false;
  while (!stack.empty() && !cycle) {
    int cur = stack.back();
    stack.pop_back();
    if (cur == target) cycle = true;
    if (!seen.insert(cur).second) continue;
    for (int in : g.nodes[cur].inputs)
      if (producer[in] >= 0) stack.push_back(producer[in]);
  }
  return cycle;
}

// Order and cycles: every activation input must come from an earlier node. If it comes
// from a later one, tell a cycle apart from a mere misordering.
Status CheckOrder(const Graph& g, const std::vector<int>& producer, const std::string& source) {
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const NodeInfo& n = g.nodes[ni];
    for (int i : n.inputs) {
      const TensorInfo& t = g.tensors[i];
      if (t.role != TensorRole::kActivation) continue;
      if (producer[i] < 0)
        return InvalidArgumentError(NodeWhere(source, n) + ": input \"" + t.name +
                                    "\" is dangling: no node produces it");
      if (producer[i] >= static_cast<int>(ni)) {
        if (ReachesNode(g, producer, producer[i], static_cast<int>(ni)))
          return InvalidArgumentError(NodeWhere(source, n) + ": cycle through tensor \"" + t.name +
                                      "\"");
        return InvalidArgumentError(NodeWhere(source, n) + ": input \"" + t.name +
                                    "\" is produced later by node \"" + g.nodes[producer[i]].name +
                                    "\"; nodes must be in topological order");
      }
    }
  }
  return OkStatus();
}

// Every tensor is used or produced, every activation produced, every weight fixed and float.
Status CheckTensors(const Graph& g, const std::vector<int>& producer, const std::vector<int>& uses,
                    const std::string& source) {
  for (int i = 0; i < static_cast<int>(g.tensors.size()); ++i) {
    const TensorInfo& t = g.tensors[i];
    if (uses[i] == 0 && producer[i] < 0)
      return InvalidArgumentError(source + ": tensor \"" + t.name + "\" (" +
                                  TensorRoleName(t.role) +
                                  ") is dangling: nothing uses or produces it");
    if (t.role == TensorRole::kActivation && producer[i] < 0)
      return InvalidArgumentError(source + ": activation \"" + t.name + "\" is never produced");
    if (t.role == TensorRole::kParam || t.role == TensorRole::kFrozen) {
      for (const Dim& d : t.shape)
        if (!d.symbol.empty())
          return InvalidArgumentError(source + ": parameter \"" + t.name +
                                      "\" has symbolic shape " + SymShapeToString(t.shape));
      if (!IsFloat(t.dtype))
        return InvalidArgumentError(source + ": parameter \"" + t.name + "\" has non-float dtype " +
                                    DTypeName(t.dtype));
    }
  }
  return OkStatus();
}

// Structure: ops, arity, attributes, producers, order, cycles, dangling tensors.
Status CheckStructure(const Graph& g, const std::string& source) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> producer(nt, -1);
  std::vector<int> uses(nt, 0);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const NodeInfo& n = g.nodes[ni];
    DS_RETURN_IF_ERROR(CheckNodeSignature(n, source));
    DS_RETURN_IF_ERROR(RecordProducer(g, ni, source, &producer));
    for (int i : n.inputs) ++uses[i];
  }
  DS_RETURN_IF_ERROR(CheckOrder(g, producer, source));
  DS_RETURN_IF_ERROR(CheckTensors(g, producer, uses, source));
  if (g.loss < 0) return InvalidArgumentError(source + ": the graph names no loss tensor");
  if (producer[g.loss] < 0)
    return InvalidArgumentError(source + ": loss \"" + g.tensors[g.loss].name +
                                "\" is not produced by a node");
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<TensorSpec>> InferTensorSpecs(const Graph& g, const DimBindings& bindings,
                                                   const std::string& source) {
  std::vector<TensorSpec> specs(g.tensors.size());
  std::vector<bool> known(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorInfo& t = g.tensors[i];
    if (t.role == TensorRole::kActivation) continue;
    auto shape = BindShape(t.shape, bindings);
    if (!shape.ok()) return shape.status().WithPrefix(source + ": tensor \"" + t.name + "\"");
    specs[i] = {*shape, t.dtype};
    known[i] = true;
  }
  for (const NodeInfo& n : g.nodes) {
    const kernels::OpDef* def = kernels::FindOp(n.op);
    if (!def) return InvalidArgumentError(NodeWhere(source, n) + ": unknown op");
    std::vector<TensorSpec> in;
    for (int i : n.inputs) {
      if (!known[i])
        return InvalidArgumentError(NodeWhere(source, n) + ": input \"" + g.tensors[i].name +
                                    "\" is not computed yet");
      in.push_back(specs[i]);
    }
    std::vector<TensorSpec> out;
    Status s = def->infer(n.attrs, in, &out);
    if (!s.ok()) return InvalidArgumentError(NodeWhere(source, n) + ": " + s.message());
    for (size_t k = 0; k < n.outputs.size() && k < out.size(); ++k) {
      int o = n.outputs[k];
      const TensorInfo& t = g.tensors[o];
      if (!t.shape.empty()) {
        auto declared = BindShape(t.shape, bindings);
        if (!declared.ok())
          return declared.status().WithPrefix(source + ": tensor \"" + t.name + "\"");
        if (*declared != out[k].shape)
          return InvalidArgumentError(NodeWhere(source, n) + ": output \"" + t.name +
                                      "\" is declared " + SymShapeToString(t.shape) + " = " +
                                      ShapeToString(*declared) + " but the op computes " +
                                      ShapeToString(out[k].shape));
      }
      if (t.dtype != out[k].dtype)
        return InvalidArgumentError(NodeWhere(source, n) + ": output \"" + t.name +
                                    "\" is declared " + DTypeName(t.dtype) +
                                    " but the op computes " + DTypeName(out[k].dtype));
      specs[o] = out[k];
      known[o] = true;
    }
  }
  return specs;
}

Status ValidateGraph(const Graph& g, const std::string& source) {
  DS_RETURN_IF_ERROR(CheckStructure(g, source));
  // Two bindings of the symbols catch shapes that only agree by accident.
  int64_t max_seq = 1;
  auto it = g.config.find("max_seq_len");
  if (it != g.config.end()) max_seq = it->second;
  for (const DimBindings& b : {DimBindings{{"batch", 2}, {"seq", std::min<int64_t>(3, max_seq)}},
                               DimBindings{{"batch", 3}, {"seq", std::max<int64_t>(1, max_seq)}}}) {
    DS_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, InferTensorSpecs(g, b, source));
    const TensorSpec& loss = specs[g.loss];
    if (loss.numel() != 1 || loss.dtype != DType::kF32)
      return InvalidArgumentError(source + ": loss \"" + g.tensors[g.loss].name +
                                  "\" must be an f32 scalar, got " + ShapeToString(loss.shape) +
                                  " " + DTypeName(loss.dtype));
  }
  return OkStatus();
}

}  // namespace ds
