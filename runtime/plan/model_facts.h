// ModelFacts: what the planner needs to know about a graph, in one pass: the flat parameter layout
// (the same as zero/param_store.h: graph parameter order, each start aligned to 16
// elements), which blocks read each parameter, each block's node range, and the activation bytes
// backward keeps per block for one micro-batch (from the OpDefs' saved-activation data), in the
// dtypes and 64-byte alignment the executor stores them in, and its activation gradients' arena.
//
// Needs the op registry populated (link //kernels/ops:op_defs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/recompute.h"

namespace ds::plan {

constexpr int64_t kFlatAlign = 16;  // elements; ParamStore's alignment

inline int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

struct ParamFacts {
  std::string name;
  int tensor = -1;
  int64_t offset = 0;  // flat element offset
  int64_t numel = 0;
  int64_t span = 0;         // numel aligned up: the flat elements it occupies
  std::vector<int> blocks;  // distinct blocks of the nodes that read it, ascending
  bool expert = false;      // stacked experts (ShardKind::kExpert): split over ep when ep > 1
};

struct BlockFacts {
  int block = 0;  // -1 before the first transformer block, num_blocks after the last
  int node_begin = 0;
  int node_end = 0;              // exclusive
  int64_t activation_bytes = 0;  // kept from forward to backward, one micro-batch
  std::vector<int> params;       // indices into ModelFacts::params, ascending
  int64_t param_elements = 0;    // sum of those params' numel
};

struct ModelFacts {
  std::string name;
  std::vector<ParamFacts> params;  // graph parameter order
  std::vector<BlockFacts> blocks;  // ascending block index
  int64_t flat_elements = 0;
  int64_t num_parameters = 0;
  int64_t frozen_elements = 0;  // the frozen weights (LoRA's base model), outside the flat layout
  int64_t input_bytes = 0;      // token ids and targets of one micro-batch
  // Activation recompute: the arena the segments' transient tensors and saved buffers share
  // (the largest segment's); blocks' activation_bytes leave them out.
  int64_t recompute_arena_bytes = 0;
  // The arena the activations nothing reads after forward share (PlaceForwardOnly).
  int64_t forward_arena_bytes = 0;
  // The activation gradients' arena (runtime/graph/activation_grads.h), one micro-batch.
  int64_t activation_grad_bytes = 0;

  // Position of `block` in `blocks`; -1 when no node has it.
  int BlockPosition(int block) const;
};

// How the executor will store the activations: fp32 (the host in fp32, or bf16 with fp32
// products), bf16 where a bf16 host step's kernels take it (runtime/graph/host_bf16.h, from the
// op definitions), or in the model dtype on a 16-bit device.
enum class ActivationStorage { kF32, kHostBf16, kDevice16 };

struct ActivationOptions {
  ActivationStorage storage = ActivationStorage::kF32;
  DType model_dtype = DType::kF32;  // kDevice16's
  bool split_backward = false;      // zero-bubble schedules: the gradients the weight half reads
                                    // stay live to the end, and stay fp32
};

// InvalidArgument when a parameter has a symbolic shape or no reader, when nodes are not grouped by
// block in node order, or when shape inference fails for (micro_batch, seq_len).
StatusOr<ModelFacts> AnalyzeModel(const Graph& graph, int64_t micro_batch, int64_t seq_len,
                                  const std::vector<RecomputeSegment>& recompute = {},
                                  const ActivationOptions& options = {});

}  // namespace ds::plan
