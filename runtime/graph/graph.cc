#include "runtime/graph/graph.h"

namespace ds {

const char* TensorRoleName(TensorRole r) {
  switch (r) {
    case TensorRole::kParam:
      return "param";
    case TensorRole::kInput:
      return "input";
    case TensorRole::kTarget:
      return "target";
    case TensorRole::kActivation:
      return "activation";
    case TensorRole::kState:
      return "state";
    case TensorRole::kFrozen:
      return "frozen";
  }
  return "?";
}

int Graph::FindTensor(const std::string& n) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == n) return static_cast<int>(i);
  return -1;
}

namespace {

std::vector<int> WithRole(const std::vector<TensorInfo>& tensors, TensorRole role) {
  std::vector<int> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].role == role) out.push_back(static_cast<int>(i));
  return out;
}

int64_t Elements(const std::vector<TensorInfo>& tensors, const std::vector<int>& which) {
  int64_t n = 0;
  for (int i : which) {
    int64_t e = 1;
    for (const Dim& d : tensors[i].shape) e *= d.size;
    n += e;
  }
  return n;
}

}  // namespace

std::vector<int> Graph::Params() const { return WithRole(tensors, TensorRole::kParam); }

std::vector<int> Graph::Frozen() const { return WithRole(tensors, TensorRole::kFrozen); }

int64_t Graph::NumFrozen() const { return Elements(tensors, Frozen()); }

int64_t Graph::NumParameters() const { return Elements(tensors, Params()); }

StatusOr<Shape> BindShape(const SymShape& shape, const DimBindings& bindings) {
  Shape out;
  out.reserve(shape.size());
  for (const Dim& d : shape) {
    if (d.symbol.empty()) {
      out.push_back(d.size);
      continue;
    }
    auto it = bindings.find(d.symbol);
    if (it == bindings.end()) return InvalidArgumentError("unbound dimension \"" + d.symbol + "\"");
    out.push_back(it->second);
  }
  return out;
}

std::string SymShapeToString(const SymShape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i].symbol.empty() ? std::to_string(shape[i].size) : shape[i].symbol;
  }
  return s + "]";
}

}  // namespace ds
