// Graph validation: everything a worker relies on before it allocates a byte.
// Rejects unknown ops, wrong arity or attributes, dangling or doubly produced tensors,
// cycles and out-of-order nodes, shape and dtype mismatches (by running each op's shape
// inference under test bindings of the symbolic dims), and a missing or non-scalar loss.
// Every error names `source` (the file) and the node or tensor.
#pragma once

#include <string>

#include "runtime/graph/graph.h"

namespace ds {

Status ValidateGraph(const Graph& graph, const std::string& source);

// Concrete specs of every tensor under `bindings`, computed by shape inference and
// checked against the declared shapes. Index = tensor index.
StatusOr<std::vector<TensorSpec>> InferTensorSpecs(const Graph& graph, const DimBindings& bindings,
                                                   const std::string& source);

}  // namespace ds
