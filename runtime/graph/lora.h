// LoRA (low-rank adapters, as PEFT and DeepSpeed-Chat train them) as a rewrite of a model
// graph: each target linear y = x W^T + b gains
//
//   y' = y + scale * ((dropout(x) A^T) B^T)     A [r, in] (lora_A), B [w, r] (lora_B)
//
// on its whole output, or on output features [begin, begin + w) when the target is one module
// of a fused weight (q_proj and v_proj inside our fused attn.qkv). The adapter is two linear
// nodes and a column_add (kernels/ops/column_add.cc) after the base node, in its block; A and
// B are new kParam tensors named <module>.lora_A.weight / <module>.lora_B.weight with the
// Hugging Face module path (what PEFT's adapter file names, after "base_model.model."). With
// freeze_base every other parameter becomes kFrozen: no gradient, no optimizer state, no
// place in the ZeRO partition. Which modules are targets: runtime/hf/hf_lora.h.
//
//   DS_ASSIGN_OR_RETURN(Graph g, ApplyLora(base, targets, {.r = 8, .scale = 2.0}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/graph/graph.h"

namespace ds {

struct LoraTarget {
  int node = -1;               // a linear node of the base graph
  int64_t begin = 0, end = 0;  // its output features the adapter adds to
  std::string module;          // the Hugging Face module path ("model.layers.0.self_attn.q_proj")
};

struct LoraOptions {
  int64_t r = 8;
  double scale = 1.0;  // alpha / r (PEFT), alpha / sqrt(r) (use_rslora), lora_scaling / r (DS-Chat)
  double dropout = 0.0;  // on the adapter's input only
  // A's initial values are uniform in +-bound: 1 / sqrt(in), PEFT's kaiming-uniform (a = sqrt 5)
  // of A [r, in]; or 1 / sqrt(r), DeepSpeed-Chat's of lora_right_weight [in, r] (= A^T).
  bool bound_from_rank = false;
  bool freeze_base = true;  // every parameter but the adapters' becomes kFrozen
};

// The rewritten graph (tensors and nodes of `base` kept, in order, the adapters' appended and
// inserted after their targets). InvalidArgument naming the module for a target that is not a
// linear node with a parameter weight, columns outside its output, or two targets on the same
// columns of one node; r must be positive.
StatusOr<Graph> ApplyLora(const Graph& base, const std::vector<LoraTarget>& targets,
                          const LoraOptions& options);

// A parameter ApplyLora adds ("<module>.lora_A.weight" / "<module>.lora_B.weight").
bool IsLoraParam(const std::string& name);

// One adapter of a rewritten graph, found from its nodes: what merging it needs.
struct LoraAdapter {
  std::string module;  // the Hugging Face module path
  std::string a, b;    // its parameters, [r, in] and [w, r]
  std::string base;    // the weight of the linear it adds to, [out, in]
  int64_t begin = 0;   // the weight's first row it covers (w rows)
  double scale = 1.0;
};
std::vector<LoraAdapter> FindAdapters(const Graph& graph);

// W[begin + i, :] += scale * (B A)[i, :]: the adapter folded into its weight (W [out, in], A
// [r, in], B [w, r], row-major fp32), as PEFT's merge_and_unload and DeepSpeed-Chat's
// fuse_lora_weight do. With scale negated it unmerges (exactly only where fp32 rounding allows).
void MergeAdapter(const float* a, const float* b, int64_t r, int64_t in, int64_t w, double scale,
                  float* weight_rows);

}  // namespace ds
