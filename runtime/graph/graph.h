// Graph: the in-memory model description every worker trains (loaded from proto/graph.proto
// by graph_io.h, checked by validate.h, built by model_builder.h). Plain structs, no
// protobuf, so that widely included headers stay light. Immutable after validation;
// safe to share between threads for reading.
//
//   DS_ASSIGN_OR_RETURN(Graph g, LoadGraph("configs/models/gpt2-tiny.pbtxt"));
//   DS_RETURN_IF_ERROR(ValidateGraph(g, "gpt2-tiny.pbtxt"));
//   Shape s = BindShape(g.tensors[0].shape, {{"batch", 4}, {"seq", 256}});
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/op.h"
#include "runtime/base/status.h"
#include "runtime/core/tensor.h"

namespace ds {

// kState: a buffer the caller binds by name (exec::ExecutorOptions::state) and keeps between
// runs: generation's KV caches, which ops may write in place, and its per-run int32 inputs
// (positions, the cache slot, pad counts).
// kFrozen: a weight that is read but not trained (LoRA's base model, runtime/graph/lora.h): it
// takes no gradient, no optimizer state and no place in the ZeRO partition; its values live in a
// store of their own (exec::ExecutorOptions::frozen).
enum class TensorRole : uint8_t { kParam, kInput, kTarget, kActivation, kState, kFrozen };
const char* TensorRoleName(TensorRole r);

// A dimension: fixed size, or a symbol ("batch", "seq") bound per run.
struct Dim {
  int64_t size = 0;
  std::string symbol;  // non-empty: symbolic
  static Dim Fixed(int64_t n) { return {n, ""}; }
  static Dim Sym(std::string s) { return {0, std::move(s)}; }
};
using SymShape = std::vector<Dim>;
using DimBindings = std::map<std::string, int64_t>;

struct InitSpec {
  enum Kind : uint8_t { kZeros, kOnes, kNormal, kUniform, kConstant };
  Kind kind = kZeros;
  float mean = 0, std = 0, low = 0, high = 0, value = 0;
};

// kExpert: split by experts (dimension 0) over the expert-parallel group.
enum class ShardKind : uint8_t { kNone, kReplicated, kColumn, kRow, kVocab, kExpert };

struct TensorInfo {
  std::string name;
  SymShape shape;
  DType dtype = DType::kF32;
  TensorRole role = TensorRole::kActivation;
  InitSpec init;
  ShardKind sharding = ShardKind::kNone;
};

struct NodeInfo {
  std::string name;
  std::string op;
  std::vector<int> inputs;   // tensor indices
  std::vector<int> outputs;  // tensor indices
  kernels::Attrs attrs;
  int block = 0;  // -1 before the first block, num_blocks after the last
  // What the node's random stream (dropout) is derived from: -1, its index. A graph rewritten
  // for tensor parallelism keeps the original node's index, so that replicated regions draw
  // the same masks at every tp degree (Megatron's model-parallel RNG rule).
  int64_t seed_id = -1;
};

struct Graph {
  std::string name;
  std::string family;
  std::vector<TensorInfo> tensors;
  std::vector<NodeInfo> nodes;  // topological order (validated)
  int loss = -1;                // tensor index of the scalar loss
  int num_blocks = 0;
  std::map<std::string, int64_t> config;  // generator settings (n_layer, n_embd, ...)

  // -1 when absent.
  int FindTensor(const std::string& name) const;
  std::vector<int> Params() const;  // tensor indices with role kParam, in declaration order
  std::vector<int> Frozen() const;  // the same for kFrozen
  int64_t NumParameters() const;    // elements over all params (shapes must be fixed)
  int64_t NumFrozen() const;        // elements over the frozen weights
};

// Concrete shape of `shape` under `bindings`; an unbound symbol is an error.
StatusOr<Shape> BindShape(const SymShape& shape, const DimBindings& bindings);
std::string SymShapeToString(const SymShape& shape);  // "[batch, seq, 256]"

// The per-sequence input of a left-padded model (ModelSpec::pad_mask): int32 [batch] left pads, a
// kState tensor its caller fills; attention, position_embedding and rope read it.
inline constexpr const char* kLeftPads = "pad.left";
// Packed documents (ModelSpec::reset_attention_mask / reset_position_ids, Megatron's flags):
// int32 [batch, seq] kState inputs the trainer fills from each micro-batch's tokens
// (runtime/data/document_masks.h): each token's document start, which attention reads, and
// its position in its document, which rope and position_embedding read.
inline constexpr const char* kDocStarts = "doc.starts";
inline constexpr const char* kDocPositions = "doc.positions";

}  // namespace ds
